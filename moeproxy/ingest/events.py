"""Overflow events: lines a mixed-precision loss scaler prints when it skips a step, which carry no
step counter of their own.

- DeepSpeed: ``OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32``
- fairseq: ``| WARNING: overflow detected, setting loss scale to: 0.25``
- apex amp / Megatron's old scaler: ``Gradient overflow.  Skipping step, loss scaler 0 reducing
  loss scale to 16384.0``
- a training script's own guard: ``Warning: Gradient norm too large: 3680.00, skipping update`` (the
  grad norm it refused is kept as ``grad_norm``)
- apex's older dynamic scaler: ``Grad overflow on iteration 8`` (the scale it falls to follows on a
  line of its own: ``Using dynamic loss scale of 4096.0``)
- TensorFlow's NaN guard (``NanTensorHook``) stopping a run: ``Model diverged with loss = NaN.`` (the
  loss of the step being attempted was NaN: stored as ``loss`` = NaN there with ``nan_iters`` = 1,
  not as a skipped update)
- a run stopped by an error that reports non-finite numbers: PyTorch's argument check of a
  distribution (``... but found invalid values:`` over ``tensor([[nan, nan, ...``), autograd's anomaly
  mode (``Function 'MulBackward0' returned nan values in its 0th output``), detectron2's
  ``FloatingPointError: Loss became infinite or NaN at iteration=7``: the step being attempted
  produced NaN/inf, stored as ``nan_iters`` = 1 there (which value went bad is not known: no metric
  is set to NaN)

Each is one skipped update. Readers store it at the step being attempted (the last logged step + 1,
or the step a tqdm bar on the same line shows + 1) as ``deepspeed/overflow`` = 1 with the scale it
fell to (``deepspeed/reduced_loss_scale``) and, where printed, the scale it tried.
"""

from __future__ import annotations

import re

from moeproxy.ingest.values import parse_number

# (at most 200 characters between two phrases: an unbounded ``.*?`` rescanned a long line from each
# "overflow" in it)
DEEPSPEED = re.compile(
    r"overflow!.{0,200}?skipping step\.?\s*attempted loss scale:\s*([^,\s]+),?\s*reducing to\s*([^\s,]+)",
    re.IGNORECASE,
)
REDUCED_ONLY = re.compile(
    r"(?:overflow detected,\s*setting loss scale to|"
    r"gradient overflow\.?\s*skipping step.{0,100}?reducing loss scale to)\s*:?\s*([^\s,]+)",
    re.IGNORECASE,
)
TQDM_DONE = re.compile(r"\|\s*(\d+)/\d+\s*\[")
SKIPPED_UPDATE = re.compile(r"\bskipping (?:the )?(?:update|step|optimizer step)\b", re.IGNORECASE)
REFUSED_NORM = re.compile(r"grad(?:ient)?[ _]?norm[^:\d\n]{0,20}:\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))",
                          re.IGNORECASE)
DIVERGED_NAN = re.compile(r"model diverged with loss\s*=\s*(nan|inf)", re.IGNORECASE)
ON_ITERATION = re.compile(r"grad(?:ient)? overflow on iteration\s*(\d+)", re.IGNORECASE)
NONFINITE_CRASH = re.compile(r"^\s*tensor\(\[+\s*[-+]?(?:nan|inf)\b|returned (?:nan|inf) values in its|"
                             r"loss became infinite or nan", re.IGNORECASE)


def overflow_record(line: str) -> dict[str, float] | None:
    """The record of an overflow event line, or None when the line is not one."""
    if "iverged" in line and (diverged := DIVERGED_NAN.search(line)):
        # the step's loss was non-finite, and the guard counts it: a NaN iteration (not a record cut
        # short by a crash, which the data stage would set aside as a logging artefact)
        return {"loss": parse_number(diverged.group(1)), "nan_iters": 1.0}
    if ("tensor" in line or "returned" in line or "became" in line) and NONFINITE_CRASH.search(line):
        return {"nan_iters": 1.0}
    if "verflow" not in line and "VERFLOW" not in line:
        if "kipping" not in line or not SKIPPED_UPDATE.search(line):
            return None
        norm = REFUSED_NORM.search(line)
        value = parse_number(norm.group(1)) if norm else None
        return {"deepspeed/overflow": 1.0} | ({"grad_norm": value} if value is not None else {})
    m = DEEPSPEED.search(line)
    if m:
        attempted, reduced = parse_number(m.group(1)), parse_number(m.group(2))
    else:
        m = REDUCED_ONLY.search(line)
        if not m:
            return {"deepspeed/overflow": 1.0} if ON_ITERATION.search(line) else None
        attempted, reduced = None, parse_number(m.group(1))
    record = {"deepspeed/overflow": 1.0}
    if attempted is not None:
        record["deepspeed/attempted_loss_scale"] = attempted
    if reduced is not None:
        record["deepspeed/reduced_loss_scale"] = reduced
    return record


def bar_step(line: str) -> int | None:
    """The step a tqdm bar on the event's line has completed (``378/2724 [``), or the updates done
    before the iteration an apex line names, or None."""
    m = TQDM_DONE.search(line)
    if m:
        return int(m.group(1))
    m = ON_ITERATION.search(line)  # iteration N (from 0) is attempted after N updates are done
    return int(m.group(1)) if m else None
