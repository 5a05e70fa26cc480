"""Lines copied verbatim from the shared real logs (tests/fixtures/real/shared), each read as the
run logged it: the printed ``Step: N`` before a dict is its step (125), ``gradient_norm`` is the
grad norm (120), and a ``"split": "val"`` record's metrics are validation series, never the
training metric of the same name (119)."""

from __future__ import annotations

import json
import math

import pytest

from moeproxy.diagnose.series import RunSeries
from moeproxy.ingest import ingest_paths, parse_file
from moeproxy.store import Store

# 125_textgen-webui-lora-llama3.2-1b-grad-norm-inf-every-step-flat-loss.log, lines 8-10 and 179
WEBUI = (
    "Step:      3 {'loss': 2.4395, 'grad_norm': inf, 'learning_rate': 8.000000000000001e-06, 'epoch': 0.017543859649122806}\n"
    "Step:      7 {'loss': 2.4141, 'grad_norm': inf, 'learning_rate': 1.6000000000000003e-05, 'epoch': 0.03508771929824561}\n"
    "Step:     11 {'loss': 2.4961, 'grad_norm': inf, 'learning_rate': 2.4e-05, 'epoch': 0.05263157894736842}\n"
    "Step:    683 {'train_runtime': 13893.3078, 'train_samples_per_second': 0.787, 'train_steps_per_second': 0.012, 'train_loss': 2.4439938653979385, 'epoch': 3.0}\n"
)

# 120_cs336-grpo-offpolicy-noclip-olmo2-1b-gsm8k-gradnorm-explosion.jsonl, lines 1-2
GRPO_120 = (
    '{"step": 124, "split": "train", "clip_count": 0.0, "clip_total": 0.0, "clip_fraction": 0.0, "loss": -0.0008583720773458481, "gradient_norm": 3.03125, "token_entropy": 0.06293708016164601, "num_response_tokens": 613.6875, "num_sequences": 8.0, "num_active_sequences": 4.0, "entropy_num_sequences": 4.0, "mean_reward": 0.35546875, "mean_format_reward": 0.953125, "mean_answer_reward": 0.35546875, "mean_advantage": 9.313225746154785e-10, "mean_group_baseline": 0.35546875, "mean_group_normalizer": 0.23881042748689651, "optimizer_updates": 32.0}\n'
    '{"step": 125, "split": "train", "clip_count": 0.0, "clip_total": 0.0, "clip_fraction": 0.0, "loss": 0.00044930470176041126, "gradient_norm": 5.2275390625, "token_entropy": 0.06776396790519357, "num_response_tokens": 638.5, "num_sequences": 8.0, "num_active_sequences": 5.0, "entropy_num_sequences": 5.0, "mean_reward": 0.5390625, "mean_format_reward": 0.9765625, "mean_answer_reward": 0.5390625, "mean_advantage": 6.984919309616089e-10, "mean_group_baseline": 0.5390625, "mean_group_normalizer": 0.27328528091311455, "optimizer_updates": 32.0}\n'
)

# 119_cs336-grpo-offpolicy-naive-olmo2-1b-gsm8k-reward-collapse-to-zero.jsonl, lines 7-9
GRPO_119 = (
    '{"step": 90, "split": "train", "clip_count": 0.0, "clip_total": 0.0, "clip_fraction": 0.0, "loss": -0.008546810917323455, "gradient_norm": 5.236328125, "token_entropy": 0.06051835557445884, "num_response_tokens": 842.09375, "num_sequences": 8.0, "num_active_sequences": 6.0, "entropy_num_sequences": 6.0, "mean_reward": 0.54296875, "mean_format_reward": 0.98828125, "mean_answer_reward": 0.54296875, "mean_advantage": -3.14321368932724e-09, "mean_group_baseline": 0.54296875, "mean_group_normalizer": 0.33968639746308327, "optimizer_updates": 32.0}\n'
    '{"step": 90, "split": "val", "total_reward": 0.4638671875, "format_reward": 0.970703125, "answer_reward": 0.4638671875, "accuracy": 0.4638671875, "avg_response_length": 529.73828125}\n'
    '{"step": 91, "split": "train", "clip_count": 0.0, "clip_total": 0.0, "clip_fraction": 0.0, "loss": -0.006738597207004204, "gradient_norm": 3.42138671875, "token_entropy": 0.06428591953590512, "num_response_tokens": 761.1875, "num_sequences": 8.0, "num_active_sequences": 4.25, "entropy_num_sequences": 4.25, "mean_reward": 0.5078125, "mean_format_reward": 0.9375, "mean_answer_reward": 0.5078125, "mean_advantage": 1.5133991837501526e-09, "mean_group_baseline": 0.5078125, "mean_group_normalizer": 0.2400209754705429, "optimizer_updates": 32.0}\n'
)
VAL_119 = GRPO_119.splitlines(keepends=True)[1]


def _stored(tmp_path, name: str, text: str):
    """(store, run) after ingesting ``text`` as a file named ``name``."""
    log = tmp_path / name
    log.write_text(text)
    store = Store(tmp_path / "runs.duckdb")
    [summary] = ingest_paths(store, [log], run="r")
    return store, summary


def _wide(store):
    return store.run_frame("r").pivot_table(index="step", columns="metric", values="value", aggfunc="first",
                                            dropna=False)


def test_webui_step_prefix_is_the_step_not_the_record_index(tmp_path):
    store, summary = _stored(tmp_path, "webui.log", WEBUI)
    assert summary.format == "printed-dicts" and not summary.step_from_index
    wide = _wide(store)
    assert sorted(wide.index) == [3, 7, 11, 683]
    assert wide.loc[7, "loss"] == pytest.approx(2.4141) and math.isinf(wide.loc[11, "grad_norm"])
    assert wide.loc[683, "train_loss"] == pytest.approx(2.4439938653979385)


def test_gradient_norm_is_the_canonical_grad_norm(tmp_path):
    store, _ = _stored(tmp_path, "grpo120.jsonl", GRPO_120)
    wide = _wide(store)
    assert "gradient_norm" not in wide.columns
    assert wide.loc[124, "grad_norm"] == 3.03125 and wide.loc[125, "grad_norm"] == 5.2275390625
    assert store.metrics("r").set_index("metric").loc["grad_norm", "original"] == "gradient_norm"


def test_a_val_split_record_is_stored_as_validation_never_as_the_training_metric(tmp_path):
    store, summary = _stored(tmp_path, "grpo119.jsonl", GRPO_119)
    wide = _wide(store)
    assert not summary.step_from_index and sorted(wide.index) == [90, 91]
    assert "response_length_mean" not in wide.columns and "avg_response_length" not in wide.columns
    assert wide.loc[90, "val/avg_response_length"] == 529.73828125
    assert wide.loc[90, "val/total_reward"] == 0.4638671875
    assert "total_reward" not in wide.columns and "split" not in wide.columns
    assert wide.loc[90, "reward_mean"] == 0.54296875  # the training records keep the canonical names
    series = RunSeries.from_frame(store.run_frame("r"))
    assert series.resolve("response_length_mean") is None  # no lookup finds the validation length


def test_a_val_split_record_after_the_lookahead_is_still_validation(tmp_path):
    """A file whose first records name no split (a plain training log) and that appends a
    validation record later: the kinds are learned from the first records, but a held-out record
    past them is still a validation record."""
    from moeproxy.ingest.formats.jsonl import LOOKAHEAD

    train = "".join(json.dumps({"step": s, "loss": 1.0 - s / 1e5}) + "\n" for s in range(LOOKAHEAD + 1))
    wide = parse_file(_write(tmp_path, train + VAL_119)).frame.pivot_table(
        index="step", columns="metric", values="value", aggfunc="first")
    assert "avg_response_length" not in wide.columns and "total_reward" not in wide.columns
    assert wide.loc[90, "val/avg_response_length"] == 529.73828125


def _write(tmp_path, text: str):
    path = tmp_path / "late-val.jsonl"
    path.write_text(text)
    return path
