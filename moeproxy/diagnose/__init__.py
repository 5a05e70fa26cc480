"""Failure diagnosis: classify what went wrong in a run, from which step, and why we think so.

Pure functions over a run's series (numpy/pandas; no SQL, no Streamlit, no torch).
``diagnose_frame(frame)`` takes the long form ``(step, metric, value)`` and returns the findings
contract of shared/DESIGN.md; ``render_text`` prints it for people; ``diagnose_pair`` adds the
comparison with a run that should match; ``DETECTORS`` lists the registered detectors; ``DETECTOR_VERSION`` is saved with stored findings so the dashboard knows
when they are stale.
"""

from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.diagnosis import diagnose_frame, diagnose_run, diagnose_series
from moeproxy.diagnose.pair import compare_runs, diagnose_pair
from moeproxy.diagnose.catalog import all_detectors
from moeproxy.diagnose.registry import DETECTORS, register_detector
from moeproxy.diagnose.render import render_text
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.taxonomy import CATEGORIES, MAIN_CATEGORIES, SECONDARY_CATEGORIES, Finding

DETECTOR_VERSION = "diagnose-2.9"  # 1.2: real-log rules, confidence; 1.3: mismatch with blow-up, overflow events;
# 2.0: LABELS.md (data stage, declared rules, causal chain, alternatives; KL/entropy blow-up are divergence);
# 2.1: evidence quotes logged records with their steps and names medians as such (verdicts unchanged);
# the entropy blow-up has its own detector, entropy_blowup; 2.2: reward parts (a format reward to 0);
# 2.3: x2-and-staying against a noisy loss's level, spikes of a few records, any metric non-finite for good;
# 2.4: the verdict forest's reading (forest.py) among the alternatives, verdict_basis on every result;
# 2.5: reward_never_improved, a tentative rule (confidence medium at most);
# 2.6: a reward fall a blow-up finished is its symptom (Rule.falls), loss_zero_to_end, entropy_frozen as printed
# 2.7: the forest lifts a rules' healthy to a label they warned of (learned_verdict=2, Rule.explains),
#      advantages_zero, fall_rating_rising, DeepSpeed's running skip count, a converged loss's vanished grad
# 2.8: scattered non-finite records that each recover are spikes, a huge spike the run got over is no blow-up,
#      a max load violation (MaxVio) and a ramp from the first records read by routing, a loss printed as
#      -ln(FLT_MIN) is a log of zero, a log inside one late epoch is no run's start
# 2.9: accuracy_frozen (tentative), a burst of skipped steps the scaler got over, the forest refitted on 1915 logs

__all__ = [
    "CATEGORIES", "DETECTORS", "DETECTOR_VERSION", "DiagnoseConfig", "Finding", "MAIN_CATEGORIES",
    "RunSeries", "SECONDARY_CATEGORIES", "all_detectors", "compare_runs", "diagnose_frame",
    "diagnose_pair", "diagnose_run", "diagnose_series", "register_detector", "render_text",
]
