"""Every supported format, from fixture logs written for this project, into a real DuckDB file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from moeproxy.ingest import ingest_paths, parse_file
from moeproxy.store import Store

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"

# file -> (format, framework, {canonical metric: {step: value}})
CASES = {
    "verl_console.log": ("verl-console", "verl", {
        "grad_norm": {1: 0.4521, 3: math.nan, 4: math.inf}, "loss": {1: -0.0123, 3: math.nan},
        "reward_mean": {2: 0.33}, "policy_entropy": {4: 1.187}, "step_time": {1: 41.2},
        "num_turns:min": {1: 1.0}, "val-core/openai/gsm8k/reward/mean@1": {1: 0.25}}),
    "verl_file.jsonl": ("verl-jsonl", "verl", {
        "grad_norm": {1: 0.51, 5: 0.6}, "logprob_diff_mean": {2: 0.002}, "loss": {8: 0.16}}),
    "trainer_state.json": ("hf-trainer-state", "trl", {
        "grad_norm": {10: 0.53, 20: math.nan, 30: math.inf}, "lr": {10: 1e-06}, "reward_mean": {40: 0.62},
        "eval_loss": {20: 0.9}, "response_length_mean": {10: 120.0}}),
    "megatron.log": ("megatron", "megatron", {
        "loss": {3: 10.89123, 5: 10.65, 6: 10.6}, "grad_norm": {3: 35.929, 6: 9.001},
        "loss_scale": {1: 4294967296.0, 5: 2147483648.0}, "skipped_iters": {1: 1, 3: 0},
        "nan_iters": {3: 0}, "step_time": {1: 243.4383}, "validation/lm loss value": {6: 10.54}}),
    "mindspeed_llm.log": ("megatron", "mindspeed-llm", {"loss": {1: 3.316887}, "grad_norm": {2: 64.112}}),
    "deepspeed.log": ("megatron", "deepspeed", {
        "deepspeed/overflow": {2: 1.0, 3: 1.0}, "deepspeed/reduced_loss_scale": {2: 32768.0, 3: 16384.0},
        "deepspeed/skipped_total": {4: 2.0}, "lr": {1: 1e-05}}),
    "mindspeed_rl.log": ("mindspeed-rl", "mindspeed-rl", {
        "grad_norm": {1: 0.3311, 2: math.nan}, "reward_mean": {2: 0.43}, "step_time": {1: 120.5012},
        "lr": {1: 1e-06}}),
    "hf_console.log": ("printed-dicts", "hf-trainer", {"loss": {1: 2.075}, "grad_norm": {2: math.nan}}),
    "openrlhf.log": ("printed-dicts", "openrlhf", {"grad_norm": {1: 0.8812, 2: 0.911}, "loss": {2: 0.0151},
                                                   "reward_mean": {1: 0.25}}),
    "slime.log": ("printed-dicts", "slime", {"grad_norm": {1: 0.52, 2: math.nan}, "loss": {1: 0.011},
                                             "logprob_diff_mean": {2: 0.005}, "step_time": {1: 88.1}}),
    "nanogpt.log": ("text", "unknown", {"loss": {0: 10.9818, 10: 9.6523, 20: math.nan}, "val loss": {0: 10.9874}}),
    "torchtitan.log": ("text", "unknown", {"loss": {1: 12.2365}, "grad_norm": {1: 4.5123, 2: math.inf},
                                           "tps": {1: 1234.0}}),
    "mlx.log": ("text", "unknown", {"loss": {10: 2.345, 20: 2.101}, "lr": {10: 1e-05}, "val loss": {1: 2.901}}),
    "rust_trainer.log": ("text", "unknown", {"loss": {1: 3.21}, "grad_norm": {2: math.nan}, "lr": {1: 3e-4}}),
    "wandb_export.csv": ("wandb-csv", "wandb", {"loss": {1: 0.52, 3: math.nan}, "grad_norm": {1: 1.1, 3: math.inf}}),
    "wandb_history.parquet": ("parquet", "hf-trainer", {"loss": {0: 2.31, 60: math.nan}, "grad_norm": {50: math.inf},
                                                         "lr": {20: 1e-05}}),
    "sb3_console.out": ("key-value-boxes", "stable-baselines3", {
        "reward_mean": {1: 85.0, 4: 64.0}, "policy_entropy": {2: 0.61, 4: 0.0911},
        "ppo_kl": {3: 0.0093, 4: math.nan}, "loss": {2: -0.00512}, "train/value_loss": {3: 12.7},
        "rollout/ep_len_mean": {1: 200.0}, "time/total_timesteps": {4: 8192.0}}),
    "msprobe": ("msprobe-csv", "msprobe", {"decoder.layers.0.mlp.router.weight/norm": {0: 0.5, 1: math.nan}}),
}


def _same(a: float, b: float) -> bool:
    if math.isnan(b):
        return math.isnan(a)
    return a == pytest.approx(b, rel=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_format_is_detected_and_values_land_in_the_store(name, tmp_path):
    fmt, framework, expected = CASES[name]
    store = Store(tmp_path / "runs.duckdb")
    summaries = ingest_paths(store, [LOGS / name], run="r")
    assert [s.format for s in summaries] == [fmt]
    assert summaries[0].framework == framework
    frame = store.run_frame("r")
    for metric, points in expected.items():
        got = frame[frame["metric"] == metric].set_index("step")["value"]
        assert not got.empty, f"{metric} missing; stored: {sorted(frame['metric'].unique())}"
        for step, value in points.items():
            assert _same(got[step], value), (metric, step, got[step], value)


def test_original_names_are_kept(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "verl_console.log"], run="r")
    names = store.metrics("r").set_index("metric")["original"].to_dict()
    assert names["grad_norm"] == "actor/grad_norm"
    assert names["loss"] == "actor/pg_loss"
    assert names["critic/score/max"] == "critic/score/max"


def test_nonfinite_values_are_counted_and_kept(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    [summary] = ingest_paths(store, [LOGS / "verl_console.log"], run="r")
    assert summary.nonfinite == 5  # pg_loss nan, ppo_kl nan+inf, grad_norm nan+inf
    assert int(store.runs().set_index("run").loc["r", "nonfinite"]) == 5


def test_record_index_stands_in_for_a_missing_step_counter(tmp_path):
    parsed = parse_file(LOGS / "hf_console.log")
    assert parsed.step_from_index
    # counted from 1, as HF's global step is (its first log follows the first optimizer step)
    assert sorted(parsed.frame["step"].unique()) == [1, 2, 3, 4]
    assert not parse_file(LOGS / "megatron.log").step_from_index


def test_epoch_counter_is_the_step_when_no_other_counter_exists(tmp_path):
    log = tmp_path / "keras.log"
    log.write_text("".join(f"epoch: {e} loss: {2.0 / e:.3f} acc: {0.1 * e:.2f}\n" for e in range(1, 6))
                   + "Epoch 6/6 - loss: nan - val loss: 1.9\n")
    parsed = parse_file(log)
    assert parsed.format == "text" and not parsed.step_from_index
    frame = parsed.frame.set_index(["metric", "step"])["value"]
    assert sorted(parsed.frame["step"].unique()) == [1, 2, 3, 4, 5, 6]
    assert frame[("loss", 2)] == 1.0 and frame[("acc", 5)] == 0.5 and math.isnan(frame[("loss", 6)])
    # beside a real step counter, epoch lines are not steps
    mixed = tmp_path / "mixed.log"
    mixed.write_text("step 10 loss=2.0\nepoch 1 val_loss=1.5 acc=0.2\nstep 20 loss=1.8\n")
    assert sorted(parse_file(mixed).frame["step"].unique()) == [10, 20]


def test_non_metric_lines_are_skipped_and_counted():
    assert parse_file(LOGS / "verl_console.log").skipped_lines == 3
    assert parse_file(LOGS / "megatron.log").skipped_lines == 5


def test_megatron_step_time_is_converted_from_ms(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [LOGS / "megatron.log"], run="m")
    frame = store.run_frame("m", ["step_time"])
    assert frame.set_index("step")["value"][3] == pytest.approx(11.21)


def test_tensorboard_event_files(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    logdir = tmp_path / "tb"
    writer = tbx.SummaryWriter(str(logdir))
    for step in range(1, 6):
        writer.add_scalar("train/grad_norm", math.inf if step == 4 else 0.1 * step, step)
        writer.add_scalar("train/loss", 2.0 - 0.1 * step, step)
    writer.add_scalar("moe/load_balancing_loss", 1.02, 5)
    writer.close()
    store = Store(tmp_path / "runs.duckdb")
    [summary] = ingest_paths(store, [logdir], run="tb")
    assert summary.format == "tensorboard"
    assert summary.nonfinite == 1
    frame = store.run_frame("tb")
    got = frame[frame["metric"] == "grad_norm"].set_index("step")["value"]
    assert got[2] == pytest.approx(0.2) and math.isinf(got[4])
    assert set(frame["metric"]) >= {"grad_norm", "loss", "aux_loss"}
    assert store.series("tb", "loss")["wall_time"].notna().all()


def test_torch_tensorboard_writer_tensors(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb2"))
    for step in range(3):
        writer.add_scalar("lm loss", 3.0 - step, step)
    writer.close()
    parsed = parse_file(next((tmp_path / "tb2").glob("events.out.tfevents.*")))
    assert parsed.frame["value"].tolist() == [3.0, 2.0, 1.0]


def test_routing_loads_go_to_the_routing_table_and_derive_imbalance(tmp_path):
    import json

    path = tmp_path / "grpo.jsonl"
    with open(path, "w") as fh:
        for step in range(1, 4):
            data = {"actor/grad_norm": 0.5, "routing_entropy/layer_0": 0.9, "routing_entropy/layer_1": 0.7}
            for layer in range(2):
                for expert in range(4):
                    data[f"routing/load/layer_{layer}/expert_{expert}"] = 0.7 if (layer, expert) == (1, 0) else 0.1
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [path], run="g")
    routing = store.routing("g")
    assert len(routing) == 3 * 2 * 4
    frame = store.run_frame("g")
    assert not frame["metric"].str.startswith("routing/load").any()
    imbalance = frame[frame["metric"] == "load_imbalance"]["value"]
    assert imbalance.tolist() == pytest.approx([0.7 / 0.25] * 3)
    entropy = frame[frame["metric"] == "routing_entropy"]["value"]
    assert entropy.tolist() == pytest.approx([0.8] * 3)
