"""A script that prints its progress and debug lines, then dumps its results as one JSON document with
the training history in it: the document is read from the line that opens it (the printed lines
before it are no records), and lines printed after it do not break it."""

from __future__ import annotations

import json

from moeproxy.ingest import parse_file


def _history(n: int) -> dict:
    train = [round(0.15 * 0.88 ** i, 6) for i in range(n - 1)] + [249.02]
    val = [round(0.2 * 0.9 ** i, 6) for i in range(n)]
    return {"architecture": "hybrid", "metrics": {"mae": [0.51, 0.19], "psnr": [51.9, 60.5]},
            "history": {"train_loss": train, "val_loss": val}, "model_params": 17202404}


def test_a_history_dumped_after_debug_lines_is_read(tmp_path):
    printed = "".join(f"DEBUG eval [pinn]: amp_pred stats: mean={0.16 + i / 100:.6f}, std=0.000000\n"
                      "performed by index method\n" for i in range(12))
    path = tmp_path / "train_and_eval.log"
    path.write_text(printed + json.dumps(_history(20), indent=2) + "\nDone in 812 s\n")
    parsed = parse_file(path)
    assert parsed.format == "json-columns"
    frame = parsed.frame
    loss = frame[frame.metric == "train_loss"].set_index("step").value
    assert list(loss.index) == list(range(20)) and loss[19] == 249.02
    assert any("printed line(s) before it" in note for note in parsed.notes)


def test_jsonl_records_after_a_preamble_stay_jsonl(tmp_path):
    printed = "".join(f"starting worker {i}\n" for i in range(5))
    records = "".join(json.dumps({"step": s, "loss": 2.0 - s / 100, "lr": [1e-4, 1e-4, 1e-4]}) + "\n" for s in range(40))
    path = tmp_path / "metrics.log"
    path.write_text(printed + records)
    parsed = parse_file(path)
    frame = parsed.frame
    assert parsed.format != "json-columns"
    assert len(frame[frame.metric == "loss"]) == 40
