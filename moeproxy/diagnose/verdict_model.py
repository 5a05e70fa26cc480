"""The root cause chosen two ways, and the way that generalises kept.

``causal``: shared/LABELS.md's rule (``verdict.causal_choice``: the earliest lasting finding, the
upstream one of findings that start together). ``learned``: a logistic regression (scikit-learn)
that scores each lasting finding as the root cause from its features (category, the rule's
properties, onset position in the run, order among the findings, records between it and the
earliest, how many findings agree, the run's length, whether the causal rule picks it); the
best-scoring finding is the verdict when its probability passes 0.5, else healthy.

``cross_validate`` compares them by leave-one-source-out cross-validation (logs of one
repository never both in training and in test). A fitted model is written as plain numbers
(``to_json``: coefficients, intercept, feature scaling), never a pickle, and read back by
``LearnedVerdict.from_json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from moeproxy.diagnose.catalog import rule_of
from moeproxy.diagnose.rules import CHAIN, label_of
from moeproxy.diagnose.taxonomy import CATEGORIES, HEALTHY

CANDIDATE_CATEGORIES = tuple(c for c in CATEGORIES if c != HEALTHY)
FEATURES = (*(f"category={c}" for c in CANDIDATE_CATEGORIES), "chain_rank", "decisive", "damage",
            "position", "order", "earliest", "records_after_earliest", "candidates", "agreeing",
            "log_records", "causal_pick")


def candidates_of(result: dict) -> list[dict]:
    """The lasting findings of a diagnosis result (critical, with an onset)."""
    return [f for f in result.get("findings", []) if f["severity"] == "critical" and f["onset_step"] is not None]


def features(result: dict) -> tuple[list[dict], np.ndarray]:
    """(candidates, one feature row per candidate)."""
    cands = candidates_of(result)
    data = result.get("data") or {}
    first, last = data.get("first_step", 0), data.get("last_step", 1)
    span = max(1, last - first)
    gap = max(float(data.get("step_gap") or 1.0), 1e-9)
    records = int(data.get("records") or 1)
    onsets = sorted(f["onset_step"] for f in cands)
    earliest = onsets[0] if onsets else 0
    rows = []
    for f in cands:
        rule = rule_of(f["rule"], f["category"])
        label = label_of(f["category"])
        row = [1.0 if f["category"] == c else 0.0 for c in CANDIDATE_CATEGORIES]
        row += [rule.rank / len(CHAIN), float(rule.decisive), float(rule.damage),
                (f["onset_step"] - first) / span,
                onsets.index(f["onset_step"]) / max(1, len(onsets) - 1),
                float(f["onset_step"] == earliest),
                min(20.0, (f["onset_step"] - earliest) / gap) / 20.0,
                len(cands) / 10.0,
                sum(label_of(g["category"]) == label for g in cands) / 5.0,
                math.log10(max(records, 1)) / 3.0,
                float(label == result.get("verdict") and f["onset_step"] == result.get("onset_step"))]
        rows.append(row)
    return cands, np.asarray(rows, dtype=float).reshape(len(rows), len(FEATURES))


@dataclass
class LearnedVerdict:
    coef: np.ndarray
    intercept: float
    mean: np.ndarray
    scale: np.ndarray
    threshold: float = 0.5

    def predict(self, result: dict) -> tuple[str, int | None]:
        cands, x = features(result)
        if not cands:
            return HEALTHY, None
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        p = 1.0 / (1.0 + np.exp(-z))
        best = int(np.argmax(p))
        if p[best] < self.threshold:
            return HEALTHY, None
        return label_of(cands[best]["category"]), int(cands[best]["onset_step"])

    def to_json(self) -> str:
        return json.dumps({"features": list(FEATURES), "coef": self.coef.tolist(), "intercept": self.intercept,
                           "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                           "threshold": self.threshold}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "LearnedVerdict":
        d = json.loads(text)
        if tuple(d["features"]) != FEATURES:
            raise ValueError("verdict model: its features are not this version's")
        return cls(np.asarray(d["coef"]), float(d["intercept"]), np.asarray(d["mean"]),
                   np.asarray(d["scale"]), float(d["threshold"]))


def training_rows(cases) -> tuple[np.ndarray, np.ndarray]:
    """Candidate rows and targets: a candidate is the root cause when its label is the log's."""
    xs, ys = [], []
    for case in cases:
        if not case.result:
            continue
        cands, x = features(case.result)
        for f, row in zip(cands, x):
            xs.append(row)
            ys.append(int(case.label != HEALTHY and label_of(f["category"]) == case.label))
    return (np.asarray(xs).reshape(-1, len(FEATURES)), np.asarray(ys))


def fit(cases, c: float = 1.0) -> LearnedVerdict:
    from sklearn.linear_model import LogisticRegression

    x, y = training_rows(cases)
    mean = x.mean(axis=0) if len(x) else np.zeros(len(FEATURES))
    scale = x.std(axis=0) if len(x) else np.ones(len(FEATURES))
    scale = np.where(scale > 1e-9, scale, 1.0)
    if len(set(y.tolist())) < 2:
        return LearnedVerdict(np.zeros(len(FEATURES)), -10.0, mean, scale)
    model = LogisticRegression(C=c, max_iter=2000).fit((x - mean) / scale, y)
    return LearnedVerdict(model.coef_[0].copy(), float(model.intercept_[0]), mean, scale)


def cross_validate(cases, c: float = 1.0) -> dict:
    """Leave-one-source-out: for each source, fit on the others, predict its logs. Returns, per
    method, the verdicts right, the onsets right (of those judged) and the predictions."""
    from moeproxy.diagnose.evaluation import onset_right

    out = _tally(len(cases))
    by_source: dict[str, list] = {}
    for case in cases:
        by_source.setdefault(case.source, []).append(case)
    for source, held in by_source.items():
        _score_picks(out, held, fit([case for case in cases if case.source != source], c))
    return out


def held_out(cases, model: LearnedVerdict) -> dict:
    """Both ways of choosing scored on ``cases`` none of which ``model`` was fitted on (a fresh set):
    the same figures as ``cross_validate``."""
    out = _tally(len(cases))
    _score_picks(out, cases, model)
    return out


def _tally(n: int) -> dict:
    """Per way of choosing: verdicts right, onsets right of those judged, logs, predictions."""
    return {method: {"right": 0, "onsets": 0, "judged": 0, "n": n, "predictions": {}} for method in ("causal", "learned")}


def _score_picks(out: dict, cases, model: LearnedVerdict) -> None:
    from moeproxy.diagnose.evaluation import onset_right

    for case in cases:
        picks = {"causal": (case.verdict, case.onset),
                 "learned": model.predict(case.result) if case.result else ("error", None)}
        for method, (verdict, onset) in picks.items():
            o = out[method]
            o["right"] += verdict in case.labels
            epoch = next((f.get("epoch") for f in case.result.get("findings", [])
                          if f.get("onset_step") == onset), None) if case.result else None
            ok = onset_right(case, verdict, onset, epoch, case.onset_counters if onset == case.onset else None)
            if ok is not None:
                o["judged"] += 1
                o["onsets"] += bool(ok)
            o["predictions"][f"{case.set}/{case.file}"] = (verdict, onset)
