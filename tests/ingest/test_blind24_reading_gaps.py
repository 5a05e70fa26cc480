"""Reading gaps blind24 showed, each on a made-up file of the shape: a console line whose numbers
carry thousands separators and units (``Sen. 1,458,316 : Time 543.44s``) with its step the counter
that grows on every line; metrics printed on lines of their own after a line with the step (PyMARL);
a JSON document of columns whose first column is longer than the sniffing window (keras-rl); NaN
written for the episodes before a warm-up ends; the episode count beside the environment steps."""

from __future__ import annotations

import json

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.semantics import read_data
from moeproxy.diagnose.series import RunSeries
from moeproxy.ingest import parse_file


def _names(parsed):
    return set(parsed.rows.names)


def test_a_console_line_with_grouped_thousands_and_units_repeats_one_template(tmp_path):
    lines = ["[2024-01-02 03:04:05] [marian] starting", "[2024-01-02 03:04:06] [data] loading corpus"]
    sentences = 700_000
    for i in range(1, 41):
        sentences += 731_113
        cost = 80.0 - i if i < 30 else 50.0 * 3 ** (i - 29)
        lines.append(f"[2024-01-02 {3 + i // 10:02d}:{i % 60:02d}:07] Ep. {1 + i // 25} : Up. {500 * i} : "
                     f"Sen. {sentences:,} : Cost {cost:.8f} : Time {500 + i * 1.37:.2f}s : "
                     f"{9000 + i * 3.1:.2f} words/s : L.r. {1e-5 * i:.4e}")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = parse_file(path)
    assert parsed.format == "line-templates"
    assert {"cost", "sen", "time", "l.r"} <= _names(parsed) and "up" not in _names(parsed)
    frame = parsed.rows.to_frame()
    assert list(frame[frame.metric == "cost"].step)[:3] == [500, 1000, 1500]
    res = diagnose_series({"loss": {500 * i: (80.0 - i if i < 30 else 50.0 * 3 ** (i - 29)) for i in range(1, 41)}})
    assert res["verdict"] == "divergence"


def test_metrics_printed_after_the_line_with_the_step_take_that_step(tmp_path):
    # PyMARL opens with its experiment parameters, printed as a dict
    lines = ["[INFO 17:52:00] pymarl Running command 'my_main'", "[INFO 17:52:00] my_main Experiment Parameters:",
             "{   'action_selector': 'epsilon_greedy',"]
    lines += [f"    'param_{i}': {i * 0.5}," for i in range(80)] + ["    'use_cuda': True}"]
    for k in range(1, 12):
        t_env = 10_000 * k + 7 * k
        lines += [f"[INFO 17:58:{k:02d}] my_main Recent Stats | t_env: {t_env:>10} | Episode: {190 * k:>8}",
                  f"epsilon:                   {1 - 0.05 * k:.4f}\tgrad_norm:                 {0.3 / k:.4f}\t"
                  f"loss:                      {0.07 / k:.4f}",
                  f"return_mean:               {4.5 + 0.3 * k:.4f}\treturn_std:                {0.3:.4f}", ""]
    path = tmp_path / "cout.txt"
    path.write_text("\n".join(lines) + "\n")
    parsed = parse_file(path, fmt="line-templates")  # (the real PyMARL logs in blind24 are detected as it)
    assert {"loss", "grad_norm", "return_mean", "epsilon"} <= _names(parsed)
    frame = parsed.rows.to_frame()
    assert list(frame[frame.metric == "loss"].step)[:2] == [10_007, 20_014]
    assert list(frame[frame.metric == "return_mean"].step)[:2] == [10_007, 20_014]


def test_a_columns_document_whose_first_column_outruns_the_sniffing_window(tmp_path):
    n = 6000
    doc = {"loss": [float("nan")] * 75 + list(np.linspace(0.9, 0.5, n - 75)),
           "episode_reward": list(np.linspace(0, 300, n)), "nb_steps": list(range(800, 800 * (n + 1), 800)),
           "episode": list(range(n))}
    path = tmp_path / "dqn_log.json"
    path.write_text(json.dumps(doc))  # one line, NaN written as JSON's NaN
    assert len(path.read_bytes().split(b'"episode_reward"')[0]) > 65536
    parsed = parse_file(path)
    assert parsed.format == "json-columns" and {"loss", "episode_reward", "episode"} <= _names(parsed)


def test_nan_before_the_metric_was_ever_finite_is_not_yet_computed():
    steps = np.arange(0, 400)
    loss = np.r_[np.full(75, np.nan), np.linspace(0.9, 0.5, 325)]
    run, reading = read_data(RunSeries({"loss": dict(zip(steps, loss))}))
    assert reading.masked["loss"] == list(range(75))
    res = diagnose_series({"loss": dict(zip(steps, loss))})
    assert res["verdict"] == "healthy", res["findings"][:2]
    # finite first, then NaN: overflow
    res = diagnose_series({"loss": dict(zip(steps, np.r_[np.linspace(0.9, 0.5, 325), np.full(75, np.nan)]))})
    assert res["verdict"] == "overflow" and res["onset_step"] == 325


def test_the_episode_count_is_reported_beside_an_environment_step_onset():
    steps = np.arange(1, 201) * 800
    reward = np.r_[np.linspace(0, 300, 120), np.full(80, 5.0)]
    res = diagnose_series({"reward_mean": dict(zip(steps, reward)), "episode": dict(zip(steps, range(200)))})
    assert res["verdict"] == "reward_collapse"
    counters = res.get("onset_counters") or {}
    assert counters.get("episode") == int(res["onset_step"] // 800) - 1, res.get("onset_counters")


def test_a_leading_progress_fraction_before_an_epoch_in_parentheses_is_the_step(tmp_path):
    lines = [f"{s}/191900 (epoch {1 + s // 1000}) loss: {8.2 - s / 1e4:.3f}, gen_loss: 8.05, KL_loss: {13 + s / 1e3:.3f}, "
             for s in range(1920, 2920, 5)]
    path = tmp_path / "nohup.out"
    path.write_text("Reading data file...\n" + "\n".join(lines) + "\n")
    frame = parse_file(path).rows.to_frame()
    loss = frame[frame.metric == "loss"]
    assert list(loss.step)[:3] == [1920, 1925, 1930] and len(loss) == 200
