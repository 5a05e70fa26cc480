"""Evidence sentences quote the log: every number is a logged value (with its step, and then the
value at that step), or is named for what it is (a median, a total, a percentile, a limit or
threshold, a ratio or share, a count, a step). A median of records, a rolling level or a smoothed
peak is never printed as if the log held it (a user read "rose from 0 to a peak of 0.125" on a
log that holds only 0.0 and 0.25). And an entropy that rises is reported as a blow-up (a
divergence), never under the name of a collapse.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from moeproxy.diagnose import RunSeries, all_detectors, diagnose_series
from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.diagnosis import diagnose_run
from moeproxy.diagnose.robust import fmt

sys.path.insert(0, str(Path(__file__).parent))
from evalset import generate_eval_set  # noqa: E402

NUMBER = re.compile(r"(?<![\w.+-])-?(?:\d+(?:\.\d+)?(?:e[+-]?\d+)?(?!\d)(?!\.\d)|(?:inf|nan)\b)")
NAMED_BEFORE = [
    r"\bsteps? $", r"\bsteps? -?[\d.e+-]+-$",                      # a step, a step range
    r"\b(median|mean|total)( of)? $",                                # a summary
    r"\bpercentile $",
    r"\b(limits?|threshold)( of)? $", r"\blimits -?[\d.e+-]+ and $",  # a configured bar
    r"\bln\($", r"\bln\(\d+\) = $",                                  # a constant
]
NAMED_AFTER = [
    r"^(x|%|th\b)",                                                  # a ratio, a share, an ordinal
    r"^ (records?|iterations|updates|steps|times|layer|logged|non-finite|NaN iterations|skipped|"
    r"short|near-zero|of (the |its )?(\d|records))",                # a count
]


def _forms(v: float, absolute: bool) -> set[str]:
    out = {fmt(v), repr(v), str(v), f"{v:.7g}", f"{v:.4f}"}
    if absolute and np.isfinite(v):
        out |= _forms(abs(v), False)
    return out


def unexplained_numbers(evidence: str, run: RunSeries) -> list[str]:
    """The numbers of ``evidence`` that are neither named (median, limit, count, ...) nor a value
    logged in one of the metrics the sentence names; for "V at step S", V must be what one of those
    metrics logged at S."""
    names = sorted((n for n in run.names if re.search(rf"(?<![\w/]){re.escape(n)}(?![\w/])", evidence)),
                   key=len, reverse=True)
    text = evidence
    for n in names:  # metric names carry digits of their own (layer_3, k3_kl)
        text = re.sub(rf"(?<![\w/]){re.escape(n)}(?![\w/])", lambda m: "M" * len(m.group()), text)
    absolute = "|" in evidence
    logged: set[str] = set()
    at: dict[int, set[str]] = {}
    for n in names:
        s = run.get(n)
        for step, v in zip(s.index, s.to_numpy(dtype=float)):
            forms = _forms(float(v), absolute)
            logged |= forms
            at.setdefault(int(step), set()).update(forms)
    bad = []
    for m in NUMBER.finditer(text):
        token, head, rest = m.group(), text[:m.start()], text[m.end():]
        if any(re.search(p, head) for p in NAMED_BEFORE) or any(re.search(p, rest) for p in NAMED_AFTER):
            continue
        step = re.match(r"^ at step (\d+)", rest)
        if step is not None:
            there = at.get(int(step.group(1)), set())
            if token not in there:
                bad.append(f"{token} at step {step.group(1)} (logged there: {sorted(there)[:6]})")
        elif token not in logged:
            bad.append(token)
    return bad


def medians_quoted_wrong(evidence: str, run: RunSeries) -> list[str]:
    """Each "median M over steps a-b" whose M is not the median of a named metric's finite records
    of steps a-b (or of its positive ones, on log scale; or with the near-zero records it says it
    left out)."""
    names = [n for n in run.names if re.search(rf"(?<![\w/]){re.escape(n)}(?![\w/])", evidence)]
    bad = []
    for m in re.finditer(r"median (?:of )?(-?[\d.e+-]+|nan) over steps? (\d+)(?:-(\d+))?( excluding)?", evidence):
        token, lo, hi = m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))
        ok = False
        for n in names:
            s = run.get(n)
            s = s[(s.index >= lo) & (s.index <= hi)]
            s = s[np.isfinite(s.to_numpy(dtype=float))]
            for part in (s, s[s > 0], s.abs()):
                if len(part) and fmt(float(np.median(part.to_numpy(dtype=float)))) == token:
                    ok = True
            if m.group(4) and len(s):  # near-zero records left out: any subset's median is possible
                ok = ok or (s.min() <= float(token) <= s.max())
        if not ok:
            bad.append(m.group())
    return bad


def _check(run: RunSeries, result: dict) -> list[str]:
    out = []
    for f in result["findings"]:
        for problem in unexplained_numbers(f["evidence"], run) + medians_quoted_wrong(f["evidence"], run):
            out.append(f"[{f['rule']}] {problem}: {f['evidence']}")
    return out


def _rl_run(reward: np.ndarray, entropy: np.ndarray | None = None) -> dict[str, pd.Series]:
    n = len(reward)
    rng = np.random.default_rng(3)
    steps = np.arange(1, n + 1)
    out = {"reward_mean": pd.Series(reward, index=steps),
           "grad_norm": pd.Series(0.5 * np.exp(rng.normal(0, 0.1, n)), index=steps),
           "loss": pd.Series(rng.normal(0, 0.02, n), index=steps)}
    if entropy is not None:
        out["policy_entropy"] = pd.Series(entropy, index=steps)
    return out


def test_a_reward_of_quarters_is_quoted_as_logged_not_as_its_median():
    """The user's log: rewards of exactly 0.0 and 0.25 (groups of four). The rolling median peaks
    at 0.125, which no record holds: the evidence used to read "reward_mean rose from 0 to a peak
    of 0.125 (step 43)"."""
    pattern = "10000000000000000001000100010000100100010010100010110000000000"
    reward = np.array([0.25 if c == "1" else 0.0 for c in pattern])
    series = _rl_run(reward)
    result = diagnose_series(series)
    assert result["verdict"] == "reward_collapse" and result["onset_step"] == 53
    run = RunSeries(series)
    (found,) = [f for f in result["findings"] if f["metric"] == "reward_mean"]
    assert not _check(run, result)
    text = found["evidence"]
    assert "peak of 0.125" not in text and "from 0 to" not in text
    assert "0.25 at step 52" in text and "0 at step 53" in text  # the last high record, the onset
    assert "rolling median 0.125" in text  # the level the rule compares with, named


def test_a_reward_whose_rolling_peak_is_no_record():
    """reward_below_peak: a smoothed peak decides, the sentence quotes the records."""
    reward = np.concatenate([np.tile([0.0, 0.25, 0.25, 0.0, 0.25, 0.25], 8), np.zeros(14)])
    series = _rl_run(reward)
    result = diagnose_series(series)
    assert result["verdict"] == "reward_collapse"
    assert not _check(RunSeries(series), result)


def test_an_entropy_blowup_quotes_records_and_is_not_called_a_collapse():
    """Entropy from 0.9/0.906 (median 0.903, no such record) to ~10: the start is named a median,
    the onset is quoted as records, and the finding is a divergence from entropy_blowup."""
    n = 40
    entropy = np.concatenate([[0.9, 0.906, 0.88, 0.87, 0.91, 0.86, 0.885, 0.872, 0.9, 0.87],
                              np.geomspace(1.6, 11.0, 10), 11.0 + 0.3 * np.sin(np.arange(n - 20))])
    reward = np.concatenate([np.linspace(0.1, 0.5, 15), np.linspace(0.5, 0.0, 10), np.zeros(n - 25)])
    series = _rl_run(reward, entropy)
    result = diagnose_series(series)
    run = RunSeries(series)
    rise = [f for f in result["findings"] if f["metric"] == "policy_entropy"]
    assert len(rise) == 1
    f = rise[0]
    assert f["category"] == "divergence" and f["rule"] == "entropy_blowup"
    assert "collapse" not in f["category"] + f["rule"] and "collapse" not in f["evidence"]
    assert "median 0.903 over steps 1-2" in f["evidence"]
    assert re.search(r"rose from [\d.]+ at step \d+ to [\d.]+ at step \d+", f["evidence"])
    assert not _check(run, result)
    assert result["verdict"] == "divergence"


def test_the_detector_that_reports_a_blowup_is_named_for_it():
    """``moeproxy diagnose --detectors`` and ``detectors=[...]``: the blow-up comes from
    ``entropy_blowup`` (a divergence); ``entropy_collapse`` reports only falls."""
    detectors = all_detectors()
    assert "entropy_blowup" in detectors and "divergence" in detectors["entropy_blowup"].description
    assert "collapse" not in detectors["entropy_blowup"].description
    n = 40
    entropy = np.concatenate([np.full(10, 0.9), np.geomspace(1.6, 11.0, 10), np.full(n - 20, 11.0)])
    series = _rl_run(np.linspace(0.1, 0.3, n), entropy)
    run = RunSeries(series)
    cfg = DiagnoseConfig()
    assert detectors["entropy_collapse"].detect(run, cfg) == []
    (rise,) = detectors["entropy_blowup"].detect(run, cfg)
    assert rise.category == "divergence" and rise.rule == "entropy_blowup"
    # and a fall is still entropy_collapse's, with its numbers named
    fall = np.concatenate([np.full(10, 0.9), np.geomspace(0.9, 0.01, 10), np.full(n - 20, 0.01)])
    # (a flat reward that moves a little: one value in every record would itself say the run never
    # had anything to learn from)
    series = _rl_run(0.2 + 0.01 * np.sin(np.arange(n)), fall)
    result = diagnose_series(series)
    assert detectors["entropy_blowup"].detect(RunSeries(series), cfg) == []
    assert result["verdict"] == "entropy_collapse"
    assert not _check(RunSeries(series), result)


@pytest.fixture(scope="module")
def eval_set():
    return generate_eval_set()


def test_every_number_of_every_finding_on_the_eval_set_is_logged_or_named(eval_set):
    """All detectors, all categories: each number is a record of a metric the sentence names (at
    the step it gives), or a median/limit/ratio/count/step, and each quoted median is the median
    of the records it names."""
    problems = []
    for labelled in eval_set:
        run = RunSeries.from_frame(labelled.frame())
        result = diagnose_run(run)
        problems += [f"{labelled.name}: {p}" for p in _check(run, result)]
    assert not problems, "\n".join(problems[:20])


def test_the_checker_catches_a_median_printed_as_a_value():
    run = RunSeries({"reward_mean": pd.Series([0.0, 0.25, 0.0, 0.25], index=[1, 2, 3, 4])})
    assert unexplained_numbers("reward_mean rose from 0 to a peak of 0.125", run) == ["0.125"]
    assert unexplained_numbers("reward_mean rose from median 0.125 over steps 1-4 to 0.25 at step 2", run) == []
    assert unexplained_numbers("reward_mean fell to 0.25 at step 3", run)  # 0 was logged there
    assert medians_quoted_wrong("reward_mean: median 0.2 over steps 1-4", run) == ["median 0.2 over steps 1-4"]

