"""The labelled evaluation set for moeproxy.diagnose, generated from first principles.

Each run is a simulated training process: a grad norm that starts high and settles (warm-up),
log-normal noise, a decaying loss, policy entropy that falls ~65% as healthy GRPO does, a reward
that rises and plateaus; MoE runs add router entropy, load imbalance and aux loss; RL runs add
trainer-vs-rollout gaps. A failure is injected by a mechanism at a known step (the label's onset)
and its consequences follow later (NaN after a blow-up, reward loss after a mismatch), so the
root cause is the earliest departure. Healthy-but-noisy controls carry single blips, fp16
loss-scale search at start-up, zero grad norms of zero-variance reward groups, sparse logging and
short runs. ``render`` writes a run in real framework text formats for the ingest path.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass
class LabelledRun:
    name: str
    label: str
    onset: int | None
    series: dict[str, pd.Series]
    style: str            # "rl" (verl/TRL-like) or "lm" (Megatron-like)
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def frame(self) -> pd.DataFrame:
        parts = [pd.DataFrame({"step": s.index.astype("int64"), "metric": name,
                               "value": s.to_numpy(dtype=float)}) for name, s in self.series.items()]
        return pd.concat(parts, ignore_index=True)

    @property
    def span(self) -> int:
        steps = np.concatenate([s.index.to_numpy() for s in self.series.values()])
        return int(max(1, steps.max() - steps.min()))


def _base(rng: np.random.Generator, n: int, every: int, style: str, moe: bool, fp16: bool = False):
    steps = every * np.arange(1, n + 1)
    t = np.arange(n) / max(1, n - 1)                     # progress 0..1
    g0 = rng.uniform(0.2, 2.0)
    gsig = rng.uniform(0.08, 0.25)
    grad = g0 * (1 + rng.uniform(1, 5) * np.exp(-t / 0.05)) * np.exp(rng.normal(0, gsig, n))
    out: dict[str, np.ndarray] = {"grad_norm": grad, "lr": np.full(n, 1e-6) * np.minimum(1, (t + 0.02) / 0.05)}
    if style == "lm":
        out["loss"] = (2.0 + 8.0 * np.exp(-t / 0.1)) * np.exp(rng.normal(0, 0.01, n))
        out["loss_scale"] = np.full(n, 131072.0 if fp16 else 1.0)
        out["skipped_iters"] = np.zeros(n)
        out["nan_iters"] = np.zeros(n)
        if moe:
            out["aux_loss"] = 1.02 + 0.01 * np.abs(rng.normal(0, 1, n))
    else:
        out["loss"] = rng.normal(0, 0.02, n)              # signed policy loss
        h0 = rng.uniform(0.5, 1.5)
        out["policy_entropy"] = h0 * (0.35 + 0.65 * np.exp(-t / 0.25)) * np.exp(rng.normal(0, 0.03, n))
        r0, r1 = rng.uniform(0.05, 0.3), rng.uniform(0.5, 0.85)
        out["reward_mean"] = r0 + (r1 - r0) * (1 - np.exp(-t / 0.2)) + rng.normal(0, 0.02, n)
        out["kl"] = 0.002 + 0.01 * t + 0.001 * np.abs(rng.normal(0, 1, n))
        out["ppo_kl"] = 0.002 * np.exp(rng.normal(0, 0.3, n))
        out["response_length_mean"] = 300 * (1 + 0.2 * t) * np.exp(rng.normal(0, 0.04, n))
        out["truncation_rate"] = np.clip(0.02 + 0.005 * rng.normal(0, 1, n), 0, 1)
        out["logprob_diff_mean"] = 0.002 * np.exp(rng.normal(0, 0.15, n))
        out["is_ratio_mean"] = 1 + 0.01 * rng.normal(0, 1, n)
        if moe:
            out["routing_entropy"] = 0.92 + 0.01 * rng.normal(0, 1, n)
            out["load_imbalance"] = 1.3 * np.exp(rng.normal(0, 0.04, n))
            out["aux_loss"] = 1.02 + 0.01 * np.abs(rng.normal(0, 1, n))
    return steps, out


def _ramp(n: int, i0: int, length: int) -> np.ndarray:
    """0 before i0, visible from i0 (the labelled onset), 1 after ``length`` records."""
    return np.clip((np.arange(n) - i0 + 1) / max(1, length), 0, 1)


def _growth(n: int, i0: int, per_record: float) -> np.ndarray:
    return np.where(np.arange(n) >= i0, (np.arange(n) - i0 + 1) * per_record, 0.0)


def _make(name, label, i0, steps, data, style, notes="", drop=None) -> LabelledRun:
    series = {}
    for k, v in data.items():
        s = pd.Series(np.asarray(v, dtype=float), index=steps)
        if drop and k in drop:
            s = s.drop(index=steps[drop[k]], errors="ignore")
        series[k] = s
    return LabelledRun(name, label, None if i0 is None else int(steps[i0]), series, style, notes)


def _shape(rng):
    """(records, logging interval) mixing long, sparse and short runs."""
    choice = rng.integers(0, 6)
    return [(400, 1), (300, 10), (120, 50), (60, 5), (16, 10), (12, 50)][choice]


def _onset_index(rng, n):
    return int(rng.integers(max(4, int(0.35 * n)), max(5, int(0.75 * n))))


def generate_eval_set(seed: int = 7, per_kind: int = 6) -> list[LabelledRun]:
    rng = np.random.default_rng(seed)
    runs: list[LabelledRun] = []

    def add(kind, fn):
        for k in range(per_kind):
            n, every = _shape(rng)
            runs.append(fn(f"{kind}-{k}", n, every))

    # ---------------- healthy controls ----------------
    def healthy_noisy(name, n, every):
        steps, d = _base(rng, n, every, rng.choice(["rl", "lm"]), bool(rng.integers(0, 2)))
        for i in rng.choice(np.arange(5, n), size=max(1, n // 60), replace=False):
            d["grad_norm"][i] *= rng.uniform(6, 20)        # single-record blips that recover
            if "loss" in d and d["loss"].min() > 0:
                d["loss"][i] *= rng.uniform(1.3, 2.0)
        return _make(name, "healthy", None, steps, d, "mixed", "single blips")

    def healthy_fp16(name, n, every):
        steps, d = _base(rng, n, every, "lm", bool(rng.integers(0, 2)), fp16=True)
        k = min(int(rng.integers(2, 8)), n // 4)
        d["loss_scale"][:k] = 2.0 ** (32 - np.arange(k)) if every == 1 else 2.0 ** (32 - 4 * np.arange(k))
        d["loss_scale"][k:] = d["loss_scale"][k - 1] / 2
        d["skipped_iters"][:k] = 1 if every == 1 else 4
        d["grad_norm"][:k] = np.nan                       # omitted/NaN during the search
        if n > 50:                                         # later ordinary dynamic scaling: one skip
            j = int(rng.integers(n // 2, n - 2))
            d["skipped_iters"][j] = 1
            d["loss_scale"][j:] /= 2
        return _make(name, "healthy", None, steps, d, "lm", "fp16 loss-scale search at start-up")

    def healthy_zero_grad(name, n, every):
        steps, d = _base(rng, n, every, "rl", bool(rng.integers(0, 2)))
        zeros = rng.random(n) < 0.06
        zeros[:3] = False
        d["grad_norm"][zeros] = 0.0
        return _make(name, "healthy", None, steps, d, "rl", "zero grad norm on zero-variance reward groups")

    add("healthy-noisy", healthy_noisy)
    add("healthy-fp16", healthy_fp16)
    add("healthy-zerograd", healthy_zero_grad)

    # ---------------- overflow ----------------
    def overflow_nan(name, n, every):
        style = rng.choice(["rl", "lm"])
        steps, d = _base(rng, n, every, style, bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        bad = rng.choice([np.nan, np.inf])
        d["grad_norm"][i0:] = bad
        if style == "rl":
            d["loss"][i0 + 1:] = np.nan
            d["policy_entropy"][i0 + 1:] = np.nan
            d["reward_mean"][i0 + 2:] = 0.0                # garbage outputs after the NaN
        else:
            d["nan_iters"][i0:] = 1
        return _make(name, "overflow", i0, steps, d, style, "sudden non-finite grad norm",
                     drop={"loss": slice(i0, None)} if style == "lm" else None)

    def overflow_scale(name, n, every):
        steps, d = _base(rng, n, every, "lm", bool(rng.integers(0, 2)), fp16=True)
        i0 = _onset_index(rng, n)
        m = n - i0
        d["loss_scale"][i0:] = np.maximum(1.0, 131072.0 / 2.0 ** (1 + np.arange(m) * (2 if every > 1 else 1)))
        d["skipped_iters"][i0:] = 1 if every == 1 else 3
        return _make(name, "overflow", i0, steps, d, "lm", "fp16 loss-scale collapse",
                     drop={"grad_norm": slice(i0, None)})

    def overflow_saturation(name, n, every):
        steps, d = _base(rng, n, every, rng.choice(["rl", "lm"]), bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        d["grad_norm"][i0:] = 65504.0
        return _make(name, "overflow", i0, steps, d, "mixed", "Ascend saturation mode (fp16 max)")

    add("overflow-nan", overflow_nan)
    add("overflow-scale", overflow_scale)
    add("overflow-saturation", overflow_saturation)

    # ---------------- divergence ----------------
    def divergence_ramp(name, n, every):
        style = rng.choice(["rl", "lm"])
        steps, d = _base(rng, n, every, style, bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        rate = np.log(rng.uniform(200, 5000)) / max(3, int(rng.uniform(0.08, 0.2) * n))
        grow = np.exp(_growth(n, i0, rate))
        d["grad_norm"] *= grow
        if style == "lm":
            d["loss"] *= np.exp(_growth(n, i0 + 1, rate / 4))
        j = i0 + int(np.log(1e4) / rate) if rng.random() < 0.5 else n
        if j < n:                                           # the blow-up ends in NaN: a consequence
            d["grad_norm"][j:] = np.nan
        return _make(name, "divergence", i0, steps, d, style, "exponential grad-norm blow-up")

    def divergence_shift(name, n, every):
        steps, d = _base(rng, n, every, rng.choice(["rl", "lm"]), bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        d["grad_norm"][i0:] *= rng.uniform(8, 50)
        if d["loss"].min() > 0:
            d["loss"][i0:] *= rng.uniform(1.5, 3)
        return _make(name, "divergence", i0, steps, d, "mixed", "sustained level shift")

    add("divergence-ramp", divergence_ramp)
    add("divergence-shift", divergence_shift)

    # ---------------- precision mismatch ----------------
    def mismatch(name, n, every):
        steps, d = _base(rng, n, every, "rl", bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        length = max(3, int(0.1 * n))
        d["logprob_diff_mean"] *= np.exp(_ramp(n, i0, length) * np.log(rng.uniform(8, 30)))
        d["is_ratio_mean"] *= np.exp(-_ramp(n, i0 + 1, length) * rng.uniform(0.3, 0.8))
        later = min(n - 2, i0 + max(3, int(0.12 * n)))       # consequences: grad creep, reward loss
        d["grad_norm"] *= np.exp(_ramp(n, later, length) * np.log(8))
        d["reward_mean"] -= _ramp(n, later + 1, 3) * 0.8 * d["reward_mean"]
        return _make(name, "precision_mismatch", i0, steps, d, "rl", "train-vs-rollout gap grows")

    add("precision-mismatch", mismatch)

    # ---------------- routing collapse ----------------
    def routing(name, n, every):
        style = rng.choice(["rl", "lm"])
        steps, d = _base(rng, n, every, style, True)
        i0 = _onset_index(rng, n)
        length = max(2, int(0.05 * n))
        if "routing_entropy" in d:
            d["routing_entropy"] -= _ramp(n, i0, length) * rng.uniform(0.35, 0.6)
            d["load_imbalance"] *= np.exp(_ramp(n, i0, length) * np.log(4))
        d["aux_loss"] *= np.exp(_ramp(n, i0, length) * np.log(rng.uniform(2.5, 4)))
        later = min(n - 2, i0 + max(3, int(0.15 * n)))
        d["grad_norm"] *= np.exp(_ramp(n, later, length) * np.log(10))
        return _make(name, "routing_collapse", i0, steps, d, style, "router concentrates on few experts")

    add("routing-collapse", routing)

    # ---------------- entropy collapse ----------------
    def entropy(name, n, every):
        steps, d = _base(rng, n, every, "rl", bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        length = max(2, int(0.06 * n))
        d["policy_entropy"] *= np.exp(-_ramp(n, i0, length) * np.log(rng.uniform(15, 60)))
        plateau = d["reward_mean"][max(0, i0 - 3): i0].mean()
        d["reward_mean"][i0:] = plateau + rng.normal(0, 0.02, n - i0)   # reward stalls
        return _make(name, "entropy_collapse", i0, steps, d, "rl", "entropy to ~2-7% while reward stalls")

    add("entropy-collapse", entropy)

    # ---------------- reward collapse ----------------
    def reward(name, n, every):
        steps, d = _base(rng, n, every, "rl", bool(rng.integers(0, 2)))
        i0 = _onset_index(rng, n)
        level = d["reward_mean"][i0 - 1]
        d["reward_mean"][i0:] -= _ramp(n - i0, 0, 2) * level * rng.uniform(0.6, 0.95)
        return _make(name, "reward_collapse", i0, steps, d, "rl", "reward falls after rising")

    add("reward-collapse", reward)

    # ---------------- secondary ----------------
    def kl_explosion(name, n, every):
        steps, d = _base(rng, n, every, "rl", False)
        i0 = _onset_index(rng, n)
        d["kl"] *= np.exp(_ramp(n, i0, max(2, n // 10)) * np.log(rng.uniform(30, 100)))
        # shared/LABELS.md files the policy running away from the reference under divergence
        return _make(name, "divergence", i0, steps, d, "rl", "KL to reference explodes")

    def length_blowup(name, n, every):
        steps, d = _base(rng, n, every, "rl", False)
        i0 = _onset_index(rng, n)
        d["response_length_mean"] *= np.exp(_ramp(n, i0, max(2, n // 10)) * np.log(3))
        d["truncation_rate"] += _ramp(n, i0, max(2, n // 10)) * 0.4
        # no other lasting anomaly: a runaway of the responses is the blow-up (LABELS.md divergence)
        return _make(name, "divergence", i0, steps, d, "rl", "responses grow to the limit")

    def vanishing(name, n, every):
        steps, d = _base(rng, n, every, "rl", False)
        i0 = _onset_index(rng, n)
        d["grad_norm"][i0:] = 0.0
        return _make(name, "vanishing_gradient", i0, steps, d, "rl", "no update: grad norm 0")

    for kind, fn in (("kl-explosion", kl_explosion), ("length-blowup", length_blowup),
                     ("vanishing-gradient", vanishing)):
        for k in range(max(2, per_kind // 2)):
            n, every = _shape(rng)
            runs.append(fn(f"{kind}-{k}", n, every))
    return runs


# ---------------------------------------------------------------------------------------------
# Rendering runs in real framework text formats (for the parse -> store -> diagnose path)
# ---------------------------------------------------------------------------------------------

VERL_NAMES = {
    "grad_norm": "actor/grad_norm", "loss": "actor/pg_loss", "policy_entropy": "actor/entropy",
    "kl": "actor/kl_loss", "ppo_kl": "actor/ppo_kl", "reward_mean": "critic/score/mean",
    "response_length_mean": "response_length/mean", "truncation_rate": "response_length/clip_ratio",
    "logprob_diff_mean": "training/rollout_probs_diff_mean", "is_ratio_mean": "rollout_corr/rollout_is_mean",
    "lr": "actor/lr",
}
TRL_NAMES = {
    "grad_norm": "grad_norm", "loss": "loss", "policy_entropy": "entropy", "kl": "kl", "lr": "learning_rate",
    "reward_mean": "reward", "response_length_mean": "completions/mean_length",
    "truncation_rate": "completions/clipped_ratio", "logprob_diff_mean": "sampling/sampling_logp_difference/mean",
    "is_ratio_mean": "sampling/importance_sampling_ratio/mean", "aux_loss": "aux_loss",
}
FORMATS_BY_STYLE = {"rl": ("verl_console", "verl_jsonl", "trainer_state", "generic_text"),
                    "lm": ("megatron", "generic_text")}


def _rows(run: LabelledRun) -> list[tuple[int, dict[str, float]]]:
    steps = sorted(set().union(*(s.index.tolist() for s in run.series.values())))
    return [(step, {k: float(s.loc[step]) for k, s in run.series.items() if step in s.index}) for step in steps]


def _style(run: LabelledRun) -> str:
    return "lm" if "loss_scale" in run.series else "rl"


def formats_for(run: LabelledRun) -> tuple[str, ...]:
    return FORMATS_BY_STYLE[_style(run)]


def _verl_value(v: float, k: int) -> str:
    text = repr(float(v)) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    return f"np.float64({text})" if k % 2 else text


def render(run: LabelledRun, fmt: str) -> tuple[str, str]:
    """(file name, file text) of ``run`` written the way ``fmt``'s framework writes its log."""
    rows = _rows(run)
    if fmt == "verl_console":
        lines = ["(TaskRunner pid=3165) Training from scratch"]
        for i, (step, vals) in enumerate(rows):
            parts = [f"step:{step}"] + [f"{VERL_NAMES.get(k, k)}:{_verl_value(v, j)}"
                                         for j, (k, v) in enumerate(vals.items())]
            parts.append(f"training/global_step:{step}")
            lines.append("(TaskRunner pid=3165) " + " - ".join(parts))
            lines.append(f"Training Progress:  {100 * (i + 1) // len(rows)}%|###   | {i + 1}/{len(rows)} "
                         f"[00:{i % 60:02d}<00:10, 64.47s/it]")
        return "train.log", "\n".join(lines) + "\n"
    if fmt == "verl_jsonl":
        lines = []
        for step, vals in rows:
            data = {VERL_NAMES.get(k, k): (v if math.isfinite(v) else None) for k, v in vals.items()}
            lines.append(json.dumps({"step": step, "data": data}))
        return "experiment.jsonl", "\n".join(lines) + "\n"
    if fmt == "trainer_state":
        history = [{"epoch": round(i / len(rows), 4), "step": step,
                    **{TRL_NAMES.get(k, k): v for k, v in vals.items()}} for i, (step, vals) in enumerate(rows)]
        state = {"best_metric": None, "epoch": 1.0, "global_step": rows[-1][0], "log_history": history,
                 "logging_steps": rows[1][0] - rows[0][0] if len(rows) > 1 else 1, "max_steps": rows[-1][0]}
        return "trainer_state.json", json.dumps(state, indent=2, sort_keys=True)
    if fmt == "megatron":
        total = rows[-1][0]
        lines = ["using world size: 8, data-parallel size: 8", "> building GPT model ..."]
        for step, v in rows:
            parts = [f" [2025-05-27 15:{(step // 60) % 60:02d}:{step % 60:02d}] iteration {step:8d}/{total:8d}",
                     f"consumed samples: {step * 128:12d}", "elapsed time per iteration (ms): 1811.8",
                     f"learning rate: {v.get('lr', 1e-6):.6E}", "global batch size:   128"]
            loss = v.get("loss", float("nan"))
            if not math.isnan(loss) and loss >= 0:       # Megatron drops NaN losses from the line
                parts.append(f"lm loss: {loss:.6E}")
            if "aux_loss" in v:
                parts.append(f"load_balancing_loss: {v['aux_loss']:.6E}")
            parts.append(f"loss scale: {v.get('loss_scale', 1.0):.1f}")
            g = v.get("grad_norm", float("nan"))
            if v.get("skipped_iters", 0) == 0 and not (math.isnan(g) and "grad_norm" not in v):
                parts.append(f"grad norm: {g:.3f}")
            parts.append(f"number of skipped iterations: {int(v.get('skipped_iters', 0)):3d}")
            parts.append(f"number of nan iterations: {int(v.get('nan_iters', 0)):3d}")
            lines.append(" | ".join(parts) + " |")
        return "megatron.log", "\n".join(lines) + "\n"
    if fmt == "generic_text":
        lines = []
        for step, vals in rows:
            kv = " | ".join(f"{k} {v:.6g}" for k, v in vals.items())
            lines.append(f"step {step} | {kv}")
        return "train.txt", "\n".join(lines) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


# ---------------------------------------------------------------------------------------------
# Pairs of runs that should match (same seed and data, another device or precision)
# ---------------------------------------------------------------------------------------------

@dataclass
class LabelledPair:
    name: str
    label: str
    onset: int | None
    run: LabelledRun
    reference: LabelledRun

    @property
    def span(self) -> int:
        return self.run.span


def _copy(run: LabelledRun, name: str, transform) -> LabelledRun:
    series = {k: pd.Series(transform(k, s.to_numpy(dtype=float).copy()), index=s.index)
              for k, s in run.series.items()}
    return LabelledRun(name, run.label, run.onset, series, run.style, run.notes)


def generate_pairs(seed: int = 5, per_kind: int = 4) -> list[LabelledPair]:
    rng = np.random.default_rng(seed)
    pairs: list[LabelledPair] = []
    healthy = [r for r in generate_eval_set(seed=seed + 100, per_kind=per_kind) if r.label == "healthy"]
    failing = [r for r in generate_eval_set(seed=seed + 200, per_kind=1) if r.label in ("divergence", "overflow")]
    for k, base in enumerate(healthy[: 2 * per_kind]):
        if k % 2 == 0:   # bitwise-identical rerun
            pairs.append(LabelledPair(f"pair-identical-{k}", "healthy", None, base, _copy(base, "ref", lambda n, v: v)))
        else:            # another device: agrees to ~1e-4
            noise = lambda n, v: v * (1 + 1e-4 * rng.normal(0, 1, v.size))  # noqa: E731
            pairs.append(LabelledPair(f"pair-close-{k}", "healthy", None, base, _copy(base, "ref", noise)))
    for k, base in enumerate(healthy[: per_kind]):
        n = len(base.series["grad_norm"])
        i0 = _onset_index(rng, n)
        dev = np.where(np.arange(n) >= i0, rng.uniform(0.05, 0.3) * (1 + 0.05 * (np.arange(n) - i0)), 0.0)

        def apart(name, v, dev=dev):
            sign = np.where(rng.random(v.size) < 0.5, -1.0, 1.0)
            return v * (1 + sign * dev) if name in ("loss", "grad_norm", "reward_mean", "policy_entropy") else v

        onset = int(base.series["grad_norm"].index[i0])
        pairs.append(LabelledPair(f"pair-mismatch-{k}", "precision_mismatch", onset, _copy(base, "run", apart), base))
    for k, base in enumerate(failing[:per_kind]):   # both fail the same way: the run's own cause
        pairs.append(LabelledPair(f"pair-both-fail-{k}", base.label, base.onset, base, _copy(base, "ref", lambda n, v: v)))
    return pairs
