"""One alert per failure: a later diagnosis updates the run's open alert only when it explains
more (earlier, or upstream at the same record), never when it is a consequence or nudges an
overflow's onset back before its first non-finite value."""

from __future__ import annotations

from moeproxy.watch.alerts import alert_line, next_alert


def result(verdict, onset):
    return {"verdict": verdict, "onset_step": onset, "confidence": "high",
            "findings": [{"category": verdict, "onset_step": onset, "severity": "critical",
                          "evidence": f"{verdict} at {onset}"}]}


def replay(readings, tie_steps=2.0):
    """The alerts raised over a sequence of diagnoses of one growing run (without ``detected_at``,
    the wall-clock time of each: two replays run a millisecond apart)."""
    open_alert, raised = None, []
    for verdict, onset in readings:
        alert = next_alert(open_alert, "r", result(verdict, onset), 200, tie_steps)
        if alert is not None:
            assert alert["detected_at"]
            raised.append({k: v for k, v in alert.items() if k != "detected_at"})
            open_alert = alert
    return raised


def test_the_churn_of_a_run_turning_to_inf_raises_one_alert_at_the_first_inf():
    # what a user saw: overflow@150, then divergence@154, @151, @150, @149 as more records came
    raised = replay([("overflow", 150), ("divergence", 154), ("divergence", 151), ("divergence", 150),
                     ("divergence", 149), ("overflow", 150)])
    assert [(a["verdict"], a["onset_step"], a["revision"]) for a in raised] == [("overflow", 150, 1)]


def test_a_healthy_reading_or_a_later_consequence_raises_nothing():
    assert replay([("healthy", None), ("divergence", 40), ("reward_collapse", 60), ("healthy", None)]) == \
        replay([("divergence", 40)])


def test_an_earlier_or_upstream_reading_updates_the_same_alert():
    raised = replay([("reward_collapse", 80), ("divergence", 60), ("precision_mismatch", 61)])
    assert [(a["verdict"], a["onset_step"], a["revision"]) for a in raised] == [
        ("reward_collapse", 80, 1), ("divergence", 60, 2), ("precision_mismatch", 61, 3)]
    assert raised[1]["replaces"] == {"verdict": "reward_collapse", "onset_step": 80}
    assert "update 2: was reward_collapse from step 80" in alert_line(raised[1])


def test_an_overflow_gives_way_only_to_something_clearly_earlier():
    raised = replay([("overflow", 150), ("divergence", 120)], tie_steps=2.0)
    assert [(a["verdict"], a["onset_step"]) for a in raised] == [("overflow", 150), ("divergence", 120)]
    # a downstream reading a record before the first inf is the consequence's onset, not an explanation
    assert len(replay([("overflow", 150), ("divergence", 148)], tie_steps=2.0)) == 1
