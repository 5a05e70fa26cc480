"""The verdict line names the onset in the log's other counters as the log prints them: a whole
number in full (an RL library's environment steps run to millions), a fraction in short."""

from __future__ import annotations

from moeproxy.diagnose.render import verdict_line


def test_a_counter_of_millions_is_printed_in_full_and_a_fraction_in_short():
    line = verdict_line({"verdict": "divergence", "onset_step": 1105920,
                         "onset_counters": {"global_step": 1105920.0, "iteration": 90.0, "progress": 0.125}})
    assert line == "divergence from step 1105920 (global_step 1105920, iteration 90, progress 0.125)"
    assert verdict_line({"verdict": "healthy", "onset_step": None}) == "healthy"
