"""The labelled evaluation set: per-category precision/recall and onset error, with floors.

Generated runs (evalset.py) are diagnosed in memory; a sample of them is also written in real
framework formats (verl console, verl JSONL, HF trainer_state.json, Megatron lines, generic
text) and goes through ingest into an in-memory store first; hand-made logs in fixtures/ carry
their labels in fixtures/labels.json. A run counts as correct when the verdict matches and the
onset is within 5% of the run's step range. Full confusion matrix: bench/diagnose_eval.py.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from evalset import formats_for, generate_eval_set, render  # noqa: E402

from moeproxy.diagnose import CATEGORIES, diagnose_frame  # noqa: E402

ONSET_TOLERANCE = 0.05


def score(labelled: list[tuple[str, int | None, int]], predicted: list[tuple[str, int | None]]) -> dict:
    """Accuracy, per-category precision/recall and onset errors (share of the step range)."""
    correct, onset_errors = 0, []
    per = {c: Counter() for c in CATEGORIES}
    for (label, onset, span), (verdict, got) in zip(labelled, predicted):
        ok = verdict == label
        if ok and onset is not None:
            err = abs(got - onset) / span
            onset_errors.append(err)
            ok = err <= ONSET_TOLERANCE
        correct += ok
        per[label]["support"] += 1
        per[label]["tp"] += verdict == label
        per[verdict]["predicted"] += 1
    stats = {c: {"precision": (v["tp"] / v["predicted"]) if v["predicted"] else None,
                 "recall": (v["tp"] / v["support"]) if v["support"] else None,
                 "support": v["support"]} for c, v in per.items()}
    return {"accuracy": correct / len(labelled), "per_category": stats, "onset_errors": onset_errors}


@pytest.fixture(scope="module")
def generated():
    return generate_eval_set(seed=7, per_kind=6)


def test_generated_set_accuracy_and_per_category_floors(generated):
    labelled = [(r.label, r.onset, r.span) for r in generated]
    predicted = []
    for r in generated:
        res = diagnose_frame(r.frame())
        predicted.append((res["verdict"], res["onset_step"]))
    s = score(labelled, predicted)
    print(json.dumps({k: v for k, v in s.items() if k != "onset_errors"}, indent=1))
    assert len(generated) >= 80
    assert s["accuracy"] >= 0.95
    for cat, st in s["per_category"].items():
        if st["support"]:
            assert st["recall"] >= 0.8, (cat, st)
        if st["precision"] is not None:
            assert st["precision"] >= 0.8, (cat, st)
    assert max(s["onset_errors"]) <= 0.25
    assert sorted(s["onset_errors"])[int(0.9 * len(s["onset_errors"]))] <= ONSET_TOLERANCE


def test_real_formats_through_ingest(tmp_path):
    from moeproxy.ingest import ingest_paths
    from moeproxy.store import Store

    runs = generate_eval_set(seed=11, per_kind=1)
    labelled, predicted, formats_seen = [], [], set()
    for i, r in enumerate(runs):
        options = formats_for(r)
        for fmt in (options[i % len(options)],):
            name, text = render(r, fmt)
            path = tmp_path / f"{r.name}-{fmt}" / name
            path.parent.mkdir()
            path.write_text(text)
            store = Store(":memory:")
            summary = ingest_paths(store, [path], run="run")[0]
            formats_seen.add(summary.format)
            res = diagnose_frame(store.run_frame("run"))
            labelled.append((r.label, r.onset, r.span))
            predicted.append((res["verdict"], res["onset_step"]))
    s = score(labelled, predicted)
    assert len(formats_seen) >= 5, formats_seen
    assert s["accuracy"] >= 0.9, s


def test_hand_made_logs_in_framework_formats(tmp_path):
    from moeproxy.diagnose.record import diagnose_target

    labels = json.loads((HERE / "fixtures" / "labels.json").read_text())
    assert len(labels) >= 6
    for name, want in labels.items():
        _, res, stored = diagnose_target(str(HERE / "fixtures" / name), str(tmp_path / "none.duckdb"))
        assert not stored
        assert res["verdict"] == want["verdict"], (name, res)
        assert res["onset_step"] == want["onset_step"], (name, res)


def test_pairs_that_should_match():
    from evalset import generate_pairs

    from moeproxy.diagnose import diagnose_pair

    pairs = generate_pairs(seed=5, per_kind=4)
    assert {p.label for p in pairs} >= {"healthy", "precision_mismatch"}
    labelled, predicted = [], []
    for p in pairs:
        res = diagnose_pair(p.run.frame(), p.reference.frame())
        labelled.append((p.label, p.onset, p.span))
        predicted.append((res["verdict"], res["onset_step"]))
    s = score(labelled, predicted)
    assert s["accuracy"] >= 0.95, (s, predicted)


def test_real_training_runs_from_the_repro_harness(tmp_path):
    """Golden diagnoses of real GRPO runs (tiny MoE, faults switched on as mechanisms)."""
    from moeproxy.diagnose.record import diagnose_target

    folder = HERE / "fixtures" / "repro"
    labels = {k: v for k, v in json.loads((folder / "labels.json").read_text()).items() if not k.startswith("_")}
    assert len(labels) == 5
    for name, want in labels.items():
        _, res, _ = diagnose_target(str(folder / name), str(tmp_path / "none.duckdb"))
        assert res["verdict"] == want["verdict"], (name, res["verdict"], res["onset_step"])
        if want["onset_step"] is not None:
            assert abs(res["onset_step"] - want["onset_step"]) <= ONSET_TOLERANCE * 59, (name, res["onset_step"])


def test_first_sight_calibration_reads_kept_outputs(tmp_path):
    from moeproxy.diagnose.evaluation import first_sight_calibration, render_calibration

    out = tmp_path / "first_sight_output.txt"
    out.write_text(
        "\n== real logs in x: verdicts 2/4 (50 %), failures found 1/2, onsets in range 1/2, slowest 0.10 s\n"
        "file                                                       wanted   got   onset accept           conf\n"
        "  a.log                                                    healthy  healthy  None              high\n"
        "X b.log                                                    healthy  divergence  80             high\n"
        "  c.jsonl                                                  overflow overflow  3 2-4            low\n"
        "X d.log                                                    overflow error  None 32-33          -  [InputError: x]\n")
    table = first_sight_calibration([out])
    assert table == {"high": (1, 2), "low": (1, 1), "-": (0, 1)}
    assert render_calibration("t", table) == "t: high 1/2 (50 %), low 1/1 (100 %), - 0/1 (0 %)"
