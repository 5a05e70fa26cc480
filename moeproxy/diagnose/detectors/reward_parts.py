"""Reward-part collapse: one part of a composite reward (a format reward, an accuracy reward) falls
to about 0 and stays there.

shared/LABELS.md, ``reward_collapse``, typical evidence: "format reward to 0". GRPO recipes add up
several reward functions (TRL logs each as ``rewards/<function>/mean``, older releases as
``rewards/<function>``; scripts print ``format_reward``, ``reward/format`` ...). The total can hide a
part going to 0 while another part still pays, so each part is read on its own:

- ``reward_part_to_zero``: a part that held a positive level (its 90th percentile) on at least
  ``min_history`` records falls below ``part_zero_share`` of that level and stays below it to the
  end, over at least ``part_min_records`` records and ``part_min_share`` of the part's records.
  The onset is the first record of that final stretch.

A part is a series whose name holds "reward" and that is not the total reward, its spread or its
zero-spread share (the vocabulary's names for those), not a statistic other than the mean (std, min,
max), not a penalty, not an intrinsic exploration bonus (``int_reward``: meant to decay) and not an
evaluation score (``reward.py`` reads those).
"""

from __future__ import annotations

import re

import numpy as np

from moeproxy.diagnose import evidence as ev
from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt, holds_from
from moeproxy.diagnose.rules import declare
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CRITICAL, REWARD_COLLAPSE, Finding
from moeproxy.vocabulary import ALIASES

thresholds(
    part_zero_share=(0.1, "a reward part below this share of its level has gone to about 0"),
    part_min_records=(5, "records a reward part must stay at about 0 to the end"),
    part_min_share=(0.1, "... and this share of the part's records"),
)

RULES = declare(REWARD_COLLAPSE, {
    "reward_part_to_zero": "one part of the reward (a format reward) fell to about 0 and stayed there",
}, damage=("reward_part_to_zero",),
   thresholds={"reward_part_to_zero": ("part_zero_share", "part_min_records", "part_min_share", "min_history")})

_WHOLE = {name.lower() for canonical in ("reward_mean", "reward_std", "zero_std_share") for name in ALIASES[canonical]}
# an intrinsic (exploration) reward - RND's, ICM's curiosity bonus - is no part of the task's reward:
# it is meant to decay as the agent has seen its states
# and DPO's implicit rewards (TRL's ``rewards/chosen``, ``rewards/rejected``, ``rewards/margins``,
# ``rewards/accuracies``: beta times the policy's log-ratio to its reference, on a preference pair):
# no score the task pays; the chosen one falls below 0 in healthy runs as both log-ratios fall
_NOT_A_PART = re.compile(r"(^|[/_ .-])(std|min|max|var|penalty|kl|int|intrinsic|curiosity|exploration)([/_ .-]|$)"
                         r"|^(eval|val|test|validation)[/_]|(^|/)rewards?/(chosen|rejected|margins?|accurac(y|ies))$")


def is_reward_part(name: str) -> bool:
    """A part of a composite reward: ``rewards/format_reward/mean``, ``format_reward``, ``reward/format``."""
    low = name.lower()
    return "reward" in low and low not in _WHOLE and not _NOT_A_PART.search(low)


def _part_to_zero(name: str, series, cfg: DiagnoseConfig) -> Finding | None:
    s = series[np.isfinite(series.to_numpy())]
    vals = s.to_numpy()
    if len(vals) <= cfg.min_history:
        return None
    level = float(np.quantile(vals, 0.9))
    if not level > 0:
        return None
    bar = cfg.part_zero_share * level
    # the first record from which every later one stays below the bar
    stays_from = holds_from(vals < bar, 1.0)
    if not stays_from.size:
        return None
    first = int(stays_from[0])
    final = len(vals) - first
    if final < max(cfg.part_min_records, cfg.part_min_share * len(vals)):
        return None
    if int(np.sum(vals[:first] >= level / 2)) < cfg.min_history:
        return None  # it never held a level before: a part that was always about 0
    onset = int(s.index[first])
    return Finding(REWARD_COLLAPSE, onset, CRITICAL, name, "reward_part_to_zero",
                   f"{name} fell {ev.move(s, onset)} and stayed below {fmt(bar)} "
                   f"({fmt(100 * cfg.part_zero_share)}% of its level {fmt(level)}, the 90th percentile) "
                   f"for the last {final} records; {ev.median_of(ev.tail(s))}")


@register_detector("reward_part_collapse", "one part of a composite reward (a format reward) falls to 0 and stays")
def detect_reward_part_collapse(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    hits = [f for name, s in run.matching(is_reward_part) if (f := _part_to_zero(name, s, cfg))]
    return [min(hits, key=lambda f: f.onset_step)] if hits else []
