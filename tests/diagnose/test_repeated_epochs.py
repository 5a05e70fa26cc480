"""LABELS.md "losses repeating exactly epoch after epoch": the same batches give the same loss when
the weights no longer change. Read from a text log whose step counter restarts with each epoch."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.ingest import parse_file


def _loss(values, start=0) -> dict:
    return {"loss": dict(zip(range(start, start + len(values)), [float(v) for v in values]))}


def _rules(result: dict) -> set[str]:
    return {f["rule"] for f in result["findings"] if f["severity"] == "critical"}


EPOCH = [0.9741, 1.3742, 1.2390, 0.9670, 1.0386, 1.1681, 1.2240, 0.9610]


def test_an_epoch_of_losses_repeated_value_for_value_is_no_learning():
    result = diagnose_series(_loss(EPOCH + EPOCH[:6]))
    assert result["verdict"] == "vanishing_gradient" and "loss_cycle_repeats" in _rules(result)
    assert result["onset_step"] == 0  # it never improved: the run never learned


def test_losses_that_differ_in_the_next_epoch_are_not():
    rng = np.random.default_rng(0)
    second = [v * (1 - 0.02 * rng.random()) for v in EPOCH[:6]]
    result = diagnose_series(_loss(EPOCH + second))
    assert "loss_cycle_repeats" not in _rules(result)


def test_short_printed_values_that_repeat_can_be_chance():
    # two significant digits: a level loss printed ``1.2 1.3 1.2 1.3 ...`` repeats without being frozen
    result = diagnose_series(_loss([1.2, 1.3] * 8))
    assert "loss_cycle_repeats" not in _rules(result)


def test_a_cycle_after_the_loss_had_come_down_dates_from_its_first_appearance():
    falling = [3.1234, 2.8123, 2.5012, 2.2345, 1.9876, 1.7654, 1.5432, 1.3456, 1.2468, 1.1357]
    result = diagnose_series(_loss(falling + EPOCH + EPOCH[:6]))
    assert "loss_cycle_repeats" in _rules(result) and result["onset_step"] == len(falling)


def test_a_step_that_restarts_with_each_epoch_runs_on_across_epochs(tmp_path):
    log = tmp_path / "train.log"
    lines = ["***** Running training *****"]
    for epoch in (1, 2):
        for step, loss in enumerate(EPOCH if epoch == 1 else EPOCH[:6]):
            n = (epoch - 1) * 8 + step + 2
            lines.append(f"Epoch {epoch}, Step {step}, Loss: {loss:.4f}:   1%|▏         | {n}/144 [00:02<02:20,  1.01it/s]")
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    frame = parsed.frame
    loss = frame[frame.metric == "loss"]
    assert sorted(loss.step) == list(range(14)) and loss.attempt.nunique() == 1
    # a resumed run (the step and the epoch both go back) is not read this way: its steps stay its own
    resumed = tmp_path / "resumed.log"
    resumed.write_text("Epoch 1, Step 0, Loss: 1.0\nEpoch 1, Step 1, Loss: 0.9\nEpoch 2, Step 0, Loss: 0.8\n"
                       "Epoch 1, Step 0, Loss: 1.0\nEpoch 1, Step 1, Loss: 0.9\n")
    frame = parse_file(resumed).frame
    loss = frame[frame.metric == "loss"]
    assert loss.step.max() == 1 and loss.attempt.nunique() > 1


def test_a_loss_of_a_few_bf16_levels_meets_its_own_values_by_chance():
    rng = np.random.default_rng(1)
    levels = np.array([9.625, 9.6875, 9.75, 9.8125])
    values = levels[rng.integers(0, 4, 300)]
    result = diagnose_series(_loss(values, start=1))
    assert "loss_cycle_repeats" not in _rules(result)


def test_a_loss_that_came_down_in_its_first_records_and_then_never_moved_never_learned():
    # an untrained model's first guesses come down to a level it then keeps: no learning
    rng = np.random.default_rng(2)
    values = np.concatenate([np.linspace(2.83, 2.62, 8), 2.61 + 0.006 * rng.standard_normal(492)])
    result = diagnose_series(_loss(np.round(values, 4)))
    assert result["verdict"] == "vanishing_gradient" and "loss_never_moved" in _rules(result)
    assert result["onset_step"] == 0
    # the same start with a loss that then goes on falling is learning
    values = np.concatenate([np.linspace(2.83, 2.62, 8), np.linspace(2.61, 1.9, 492)
                             + 0.006 * rng.standard_normal(492)])
    assert diagnose_series(_loss(np.round(values, 4)))["verdict"] == "healthy"


def test_only_the_periods_that_can_hold_are_checked_and_the_answer_is_every_period_s():
    # the cycle reader looks only at periods the log's last records (and the record before a run of
    # one value it ends in) allow; its answer must be what trying every period gives, on logs made
    # to repeat at several periods, to end in runs of one value, and to hold zeros
    import re

    import pandas as pd

    from moeproxy.diagnose.config import DiagnoseConfig
    from moeproxy.diagnose.detectors import gradient
    from moeproxy.diagnose.series import RunSeries

    cfg = DiagnoseConfig()

    def every_period(s):
        v = s.to_numpy(dtype=float)
        for period in range(2, v.size - cfg.vanishing_min_records + 1):
            same = np.abs(v[period:] - v[:-period]) <= cfg.same_value * np.abs(v[period:])
            n_same = gradient._tail_run(same)
            if n_same < cfg.vanishing_min_records:
                continue
            repeated = v[v.size - n_same:]
            if np.unique(repeated).size < 2 or np.median([gradient._digits(x) for x in repeated]) < cfg.min_digits:
                continue
            if np.unique(v).size < cfg.cycle_distinct_share * min(period, v.size - period):
                continue
            return period
        return None

    rng = np.random.default_rng(7)
    seen = set()
    for trial in range(300):
        period = int(rng.integers(2, 12))
        cycle = np.round(rng.uniform(0.5, 2.0, period), 4)
        head = np.round(rng.uniform(0.5, 3.0, int(rng.integers(0, 20))), 4)
        body = np.tile(cycle, int(rng.integers(1, 4)))[: int(rng.integers(1, 3 * period + 1))]
        tail = np.full(int(rng.integers(0, 9)), float(rng.choice([0.0, cycle[0], 1.2345])))
        v = np.concatenate([head, body, tail, np.tile(cycle, 2)[: int(rng.integers(0, 2 * period + 1))]])
        if rng.random() < 0.3:
            v = np.concatenate([v, tail])
        if v.size < cfg.vanishing_min_records + 2:
            continue
        s = pd.Series(v, index=np.arange(v.size))
        found = gradient._repeated_cycle(RunSeries({"loss": s}), ("loss", s), cfg)
        want = every_period(s)
        got = int(re.search(r"the records (\d+) before them", found[0].evidence).group(1)) if found else None
        assert got == want, (trial, v.tolist())
        seen.add(want is not None)
    assert seen == {True, False}
