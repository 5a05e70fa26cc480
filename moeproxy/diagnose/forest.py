"""A verdict learned over what the series did, beside the rules' own: a random forest over features
that name no rule, and the rules' verdict as one more feature.

Why: measured as the blind sets were met (``bench/series_model.py``: each set judged by a forest
fitted only on the sets before it, with the rules' verdict as the rules gave it at first sight),
such a forest named the label of more real logs than the rules did at first sight. The rules stay
the evidence (every finding, its onset, what it measured); the forest weighs them against the
shape of the curves they did not fire on.

Features (``run_features``), per role the data stage resolves (loss, grad norm, reward, policy
entropy, KL, PPO KL, a critic's value loss, a validation loss): the last quarter's median against
the first quarter's, the best and the worst stretch (in log10 where the values are positive, in
noise widths otherwise), the largest record over the median, the shares of non-finite and of
repeated values, the spread and trend of the second half; and the run's length, whether it is
RL's, how many metrics it has. The forest ships as plain numbers (``verdict_forest.json``: each
tree's split features, thresholds, children and leaf class shares), never a pickle; prediction is
numpy alone, the same walk scikit-learn makes (float32 features, ``<=`` goes left).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moeproxy.diagnose.robust import diff_noise, fmt, quarter_count
from moeproxy.diagnose.rules import declare, label_of
from moeproxy.diagnose.taxonomy import CATEGORIES, CRITICAL, HEALTHY, SEVERITIES, Finding

MODEL = Path(__file__).with_name("verdict_forest.json")
ROLES = ("loss", "grad_norm", "reward", "policy_entropy", "kl", "ppo_kl", "value_loss", "val_loss")
VERDICTS = tuple(CATEGORIES)
_VAL_LOSS = re.compile(r"(?:^|[/_ ])(?:val|eval|valid|validation|test)[/_ ]?loss$", re.IGNORECASE)


def _trend(v: np.ndarray) -> float:
    return float(np.corrcoef(np.arange(v.size), v)[0, 1]) if v.size > 2 and np.std(v) > 0 else 0.0


def rolling_levels(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions, rolling median) of ``v`` over an eighth of its records, at most 200 points."""
    n = v.size
    half = max(1, quarter_count(n) // 2)
    at = np.arange(0, n, max(1, n // 200))
    return at, np.array([np.median(v[max(0, i - half):i + half + 1]) for i in at])


def series_features(values: np.ndarray) -> dict[str, float]:
    """What one series did, in terms no rule uses."""
    finite = np.isfinite(values)
    out = {"present": 1.0, "nonfinite": float(1.0 - finite.mean()) if values.size else 0.0,
           "nonfinite_last": float(values.size > 0 and not finite[-1])}
    v = values[finite]
    if v.size < 4:
        out["short"] = 1.0
        return out
    n = v.size
    q = quarter_count(n)
    first, last = float(np.median(v[:q])), float(np.median(v[-q:]))
    noise = diff_noise(v) + 1e-12
    _, rolled = rolling_levels(v)
    low, high = float(rolled.min()), float(rolled.max())
    eps = 1e-12 + 1e-6 * float(np.median(np.abs(v)))
    positive = bool((v >= 0).all())

    def lg(x: float) -> float:
        return math.log10(abs(x) + eps)

    tail = v[n // 2:]
    out.update({
        "log_last_first": lg(last) - lg(first) if positive else 0.0,
        "log_last_low": lg(last) - lg(low) if positive else 0.0,
        "log_last_high": lg(last) - lg(high) if positive else 0.0,
        "log_max_median": lg(float(v.max())) - lg(float(np.median(v))) if positive else 0.0,
        "z_last_first": float(np.clip((last - first) / noise, -50, 50)),
        "z_last_high": float(np.clip((last - high) / noise, -50, 50)),
        "z_last_low": float(np.clip((last - low) / noise, -50, 50)),
        "last_in_range": (last - low) / (high - low) if high > low else 0.5,
        "first_in_range": (first - low) / (high - low) if high > low else 0.5,
        "repeated": float(np.mean(np.diff(v) == 0)),
        "all_zero": float(not v.any()),
        "spread_tail": float(np.std(tail) / (abs(float(np.mean(tail))) + eps)),
        "trend_tail": _trend(tail),
        "trend": _trend(v),
        "log_records": math.log10(n),
    })
    return out


def role_series(run, role: str):
    """(name, series) the data stage resolves for a role, or None."""
    from moeproxy.diagnose.detectors.divergence import VALUE_LOSS

    if role == "reward":
        return run.resolve_reward()
    if role in ("value_loss", "val_loss"):
        pattern = VALUE_LOSS if role == "value_loss" else _VAL_LOSS
        return next(iter(run.matching(lambda n: pattern.search(n) is not None)), None)
    return run.resolve(role)


def run_features(run) -> dict[str, float]:
    """The features of one run, as the detectors see it (after ``semantics.read_data``)."""
    feats: dict[str, float] = {}
    for role in ROLES:
        found = role_series(run, role)
        if found is not None:
            for k, x in series_features(found[1].to_numpy(dtype=float)).items():
                feats[f"{role}.{k}"] = x
    feats["is_rl"] = float(run.is_rl)
    feats["log_metrics"] = math.log10(1 + len(run.names))
    return feats


def feature_row(names: list[str], feats: dict[str, float], rules_verdict: str) -> np.ndarray:
    """One row in the forest's column order: the named features, then the rules' verdict one-hot."""
    row = [feats.get(k, 0.0) for k in names] + [float(rules_verdict == v) for v in VERDICTS]
    return np.nan_to_num(np.asarray(row, dtype=float), nan=0.0, posinf=50.0, neginf=-50.0)


@dataclass
class Forest:
    features: list[str]        # the series features' names (the rules' verdict one-hot follows them)
    classes: list[str]
    trees: list[dict]          # per tree: feature, threshold, left, right (node arrays), leaf -> shares
    examples: dict[str, int]   # labelled logs of each label it was fitted on

    def predict_proba(self, row: np.ndarray) -> np.ndarray:
        x = np.asarray(row, dtype=np.float32)
        total = np.zeros(len(self.classes))
        for t in self.trees:
            node = 0
            while t["left"][node] >= 0:
                node = t["left"][node] if x[t["feature"][node]] <= t["threshold"][node] else t["right"][node]
            total += t["shares"][node]
        return total / max(len(self.trees), 1)

    def judge(self, feats: dict[str, float], rules_verdict: str) -> dict[str, float]:
        """Each label's probability for a run with these features and this rules' verdict."""
        p = self.predict_proba(feature_row(self.features, feats, rules_verdict))
        return {c: float(x) for c, x in zip(self.classes, p)}

    def to_json(self) -> str:
        trees = []
        for t in self.trees:
            trees.append({"feature": t["feature"], "threshold": [float(v) for v in t["threshold"]],
                          "left": t["left"], "right": t["right"],
                          "leaves": {str(i): [round(float(v), 4) for v in s] for i, s in t["shares"].items()}})
        return json.dumps({"kind": "random forest (scikit-learn), walked by moeproxy.diagnose.forest",
                           "features": self.features, "rules_verdict_onehot": list(VERDICTS),
                           "classes": self.classes, "examples": self.examples, "trees": trees},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Forest":
        d = json.loads(text)
        if tuple(d["rules_verdict_onehot"]) != VERDICTS:
            raise ValueError("verdict forest: its verdict columns are not this version's categories")
        trees = [{"feature": t["feature"], "threshold": t["threshold"], "left": t["left"], "right": t["right"],
                  "shares": {int(i): np.asarray(s) for i, s in t["leaves"].items()}} for t in d["trees"]]
        return cls(list(d["features"]), list(d["classes"]), trees, {k: int(v) for k, v in d["examples"].items()})


def fit_forest(rows: np.ndarray, labels: list[str], names: list[str], trees: int = 100,
               depth: int | None = 10, seed: int = 0) -> Forest:
    """A forest fitted by scikit-learn, kept as plain node arrays."""
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(n_estimators=trees, min_samples_leaf=3, max_features="sqrt", max_depth=depth,
                                   random_state=seed).fit(rows, labels)
    out = []
    for est in model.estimators_:
        t = est.tree_
        left = t.children_left.tolist()
        shares = {}
        for i in range(t.node_count):
            if left[i] < 0:
                v = t.value[i][0]
                shares[i] = v / max(float(v.sum()), 1e-12)
        out.append({"feature": [int(f) for f in t.feature], "threshold": t.threshold.tolist(), "left": left,
                    "right": t.children_right.tolist(), "shares": shares})
    examples = {str(c): int(sum(1 for y in labels if y == c)) for c in model.classes_}
    return Forest(list(names), [str(c) for c in model.classes_], out, examples)


_LOADED: dict[str, Forest | None] = {}


def shipped() -> Forest | None:
    """The forest shipped with the package (None if its file is missing)."""
    if "model" not in _LOADED:
        _LOADED["model"] = Forest.from_json(MODEL.read_text()) if MODEL.is_file() else None
    return _LOADED["model"]


# where a label the rules found nothing lasting for shows in the series: (role, direction)
_SHOWS_IN = {
    "divergence": (("loss", +1), ("grad_norm", +1), ("value_loss", +1), ("kl", +1), ("ppo_kl", +1),
                   ("policy_entropy", +1), ("val_loss", +1)),
    "reward_collapse": (("reward", -1),),
    "entropy_collapse": (("policy_entropy", -1),),
    "vanishing_gradient": (("grad_norm", -1), ("loss", 0), ("reward", 0)),
    "overflow": (("loss", 0), ("grad_norm", 0)),
}


def _lasting_crossing(v: np.ndarray, level: float, direction: int, after: int) -> int | None:
    """The first record after ``after`` from which ``v``'s rolling median stays past ``level``."""
    at, rolled = rolling_levels(v)
    past = rolled > level if direction > 0 else rolled < level
    past[at < after] = False
    if not past.any() or not past[-1]:
        return None
    back = np.flatnonzero(~past)
    start = int(back[-1]) + 1 if back.size else int(np.flatnonzero(past)[0])
    return int(at[start])


def series_onset(run, label: str) -> tuple[int, str, str] | None:
    """(step, metric, evidence) where ``label`` shows in the series when no rule's finding dates it:
    the first record from which the series stays a quarter of the way from where it stood (its best
    stretch for a rise or a fall, its first records otherwise) to where it ended; a label that never
    showed as a change (a run that never learned) from its first record; non-finite values from the
    first one."""
    for role, direction in _SHOWS_IN.get(label, ()):
        found = role_series(run, role)
        if found is None:
            continue
        name, s = found
        values = s.to_numpy(dtype=float)
        finite = np.isfinite(values)
        if label == "overflow":
            if finite.all():
                continue
            bad = int(np.flatnonzero(~finite)[0])
            return (int(s.index[bad]), name, f"{name} is non-finite from step {int(s.index[bad])} "
                                              f"({int((~finite).sum())} of {values.size} records)")
        v, steps = values[finite], s.index.to_numpy()[finite]
        if v.size < 4:
            continue
        q = quarter_count(v.size)
        first, last = float(np.median(v[:q])), float(np.median(v[-q:]))
        if direction == 0:
            return (int(steps[0]), name, f"{name}: median {fmt(first)} over its first {q} records, "
                                         f"{fmt(last)} over its last {q}: no lasting change from the start")
        at, rolled = rolling_levels(v)
        ref_at = int(at[int(np.argmin(rolled) if direction > 0 else np.argmax(rolled))])
        ref = float(rolled.min() if direction > 0 else rolled.max())
        if (last - ref) * direction <= 0:
            continue
        level = ref + 0.25 * (last - ref)
        start = _lasting_crossing(v, level, direction, ref_at)
        if start is None:
            continue
        word = "rose" if direction > 0 else "fell"
        return (int(steps[start]), name, f"{name} {word} from a median of {fmt(ref)} around step {int(steps[ref_at])} "
                                         f"to {fmt(last)} over its last {q} records, staying past {fmt(level)} "
                                         f"from step {int(steps[start])}")
    return None


for _label in _SHOWS_IN:
    declare(_label, {f"forest_{_label}": f"the verdict forest finds {_label} likeliest for the run's series "
                                         f"and the rules' verdict, and no rule's finding dates it"})


def forest_reading(run, findings: list, cause, min_examples: int) -> dict | None:
    """The forest's reading of a run beside the rules' (``cause``: their root-cause finding, None
    for healthy): ``{"label", "probability", "likeliest", "rules_verdict", "finding", "may_decide",
    "why"}``, or None when no forest is shipped. ``finding`` is the learned label's root cause: its own
    lasting finding (else any finding of it), the earliest; with none, a finding made from where the
    label shows in the series (``series_onset``); None for healthy.

    ``may_decide`` is False where the rules' reading must stand whatever the forest says: over a
    verdict a decisive finding makes (``Rule.decisive``: LABELS.md's unambiguous evidence, non-finite
    values out of a calm run, a blow-up of two orders of magnitude), and over a verdict of a label the
    forest saw fewer than ``min_examples`` real logs of (precision mismatch and routing collapse,
    which public logs rarely carry)."""
    from moeproxy.diagnose.catalog import rule_of  # (the catalog imports every detector)

    forest = shipped()
    if forest is None:
        return None
    rules_verdict = label_of(cause.category) if cause is not None else HEALTHY
    probs = forest.judge(run_features(run), rules_verdict)
    learned = max(probs, key=probs.get)
    out = {"label": learned, "probability": round(probs[learned], 3), "rules_verdict": rules_verdict,
           "likeliest": {c: round(p, 3) for c, p in sorted(probs.items(), key=lambda kv: -kv[1])[:3]},
           "finding": None, "may_decide": True, "why": ""}
    if cause is not None and rule_of(cause.rule, cause.category).decisive:
        out.update(may_decide=False, why=f"a decisive finding ({cause.rule}) settles the reading")
    elif rules_verdict != HEALTHY and forest.examples.get(rules_verdict, 0) < min_examples:
        out.update(may_decide=False, why=f"the forest was fitted on {forest.examples.get(rules_verdict, 0)} "
                                         f"real logs labelled {rules_verdict}")
    if learned in (HEALTHY, rules_verdict):
        out["finding"] = cause if learned == rules_verdict else None
        return out
    own = [f for f in findings if label_of(f.category) == learned and f.onset_step is not None]
    if own:
        out["finding"] = min(own, key=lambda f: (SEVERITIES.index(f.severity), f.onset_step))
        return out
    shown = series_onset(run, learned)
    step, metric, where = shown if shown is not None else (
        run.first_step, "-", "no single series shows it; the forest read the run as a whole")
    out["finding"] = Finding(learned, step, CRITICAL, metric, f"forest_{learned}",
                             f"the verdict forest finds {learned} likeliest (probability {probs[learned]:.2f}; "
                             f"the rules' verdict {rules_verdict}): {where}")
    return out
