"""Reading gaps blind31's logs showed, on made-up files of the shape: sacred's info.json written
pretty (every NumPy scalar a jsonpickle object on lines of its own), and a JSON document holding a
run's per-epoch records as a list of objects under one key beside its settings."""

from __future__ import annotations

import json

from moeproxy.ingest import parse_file


def _np(x: float) -> dict:
    return {"dtype": "float64", "py/object": "numpy.float64", "value": x}


def test_a_pretty_printed_sacred_info_json_of_numpy_scalars_is_read(tmp_path):
    n = 12
    doc = {"return_mean": [_np(30.0 - 0.5 * i) for i in range(n)], "return_mean_T": [1000 * (i + 1) for i in range(n)],
           "loss": [_np(0.1 * (i + 1)) for i in range(n)], "loss_T": [1000 * (i + 1) + 7 for i in range(n)]}
    log = tmp_path / "info.json"
    log.write_text(json.dumps(doc, indent=2))
    parsed = parse_file(log)
    assert parsed.format == "json-columns"
    frame = parsed.frame
    ret = frame[frame.metric == "return_mean"].set_index("step")["value"]
    assert list(ret.index[:2]) == [1000, 2000] and ret.loc[12000] == 24.5


def test_a_list_of_epoch_records_under_a_key_is_a_table(tmp_path):
    history = [{"epoch": e, "value_loss": 0.06 / e, "q_loss": 7.9 * e, "actor_loss": 1.0 + e} for e in range(1, 41)]
    doc = {"env": "ant-medium-v2", "seed": 1, "avg_return": -108.7, "iql_history": history}
    log = tmp_path / "result.json"
    log.write_text(json.dumps(doc, indent=2))
    parsed = parse_file(log)
    assert parsed.format == "json-columns" and not parsed.step_from_index
    frame = parsed.frame
    q = frame[frame.metric == "q_loss"].set_index("step")["value"]
    assert list(q.index[:3]) == [1, 2, 3] and q.loc[40] == 7.9 * 40
    assert "avg_return" not in set(frame.metric)  # a summary number beside the records is no record


def test_rl_games_info_kl_is_the_new_vs_old_kl():
    from moeproxy.ingest.names import canonical_of

    # rl_games (IsaacGymEnvs) logs PPO's new-vs-old KL of each epoch as info/kl: not a KL to a reference
    assert canonical_of("info/kl")[0] == "ppo_kl"
