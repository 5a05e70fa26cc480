"""LABELS.md "the run never learns at all", read on a classifier's loss at its chance level: a loss
that stays at ln(k) for a small k from the first record to the last (a binary classifier at ln 2 with
a slow drift of a few per cent) never learned more than the class prior; a classifier that gets well
below ln(k), and a loss that only passes through ln(k) on its way down, learned."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(loss: np.ndarray, first: int = 500, every: int = 500) -> dict:
    steps = [first + every * i for i in range(len(loss))]
    rng = np.random.default_rng(3)
    grad = 2 + 8 * rng.random(len(loss))  # a grad norm that never goes small: the weights do move
    return diagnose_series({"loss": dict(zip(steps, loss.tolist())), "grad_norm": dict(zip(steps, grad.tolist()))})


def _rules(result: dict) -> set[str]:
    return {f["rule"] for f in result["findings"]}


def test_a_binary_classifier_at_ln2_from_start_to_end_never_learned():
    rng = np.random.default_rng(1)
    loss = np.linspace(0.705, 0.675, 140) + 0.008 * rng.standard_normal(140)
    result = _run(loss)
    assert result["verdict"] == "vanishing_gradient" and result["onset_step"] == 500
    assert "loss_at_chance" in _rules(result)


def test_a_four_way_classifier_at_ln4_never_learned():
    rng = np.random.default_rng(2)
    loss = np.linspace(1.41, 1.36, 130) + 0.012 * rng.standard_normal(130)
    assert "loss_at_chance" in _rules(_run(loss))


def test_a_classifier_that_gets_below_chance_learned():
    rng = np.random.default_rng(4)
    loss = np.concatenate([np.full(30, 0.69), np.linspace(0.69, 0.35, 110)]) + 0.008 * rng.standard_normal(140)
    assert "loss_at_chance" not in _rules(_run(loss))


def test_a_loss_that_passes_ln2_on_its_way_down_is_not_read():
    rng = np.random.default_rng(5)
    loss = np.linspace(2.5, 0.2, 140) + 0.01 * rng.standard_normal(140)
    assert "loss_at_chance" not in _rules(_run(loss))


def test_a_language_model_flat_at_a_larger_ln_k_is_not_read_as_a_classifier():
    # ln 8 = 2.079: a LoRA fine-tune's loss flat near 2.1 is no chance level (k above chance_classes)
    rng = np.random.default_rng(6)
    loss = 2.09 + 0.04 * rng.standard_normal(100)
    assert "loss_at_chance" not in _rules(_run(loss, first=10, every=10))


def test_ten_epochs_at_ln4_from_the_start_are_enough_to_say_it_never_learned():
    # a four-way classifier's loss over ten epochs, 1.393-1.398 with the accuracy at chance: ten
    # records at the prior from the run's start are no learning (the rule once asked for twenty)
    loss = np.array([1.398, 1.396, 1.395, 1.396, 1.394, 1.395, 1.393, 1.395, 1.394, 1.395])
    result = _run(loss, first=1, every=1)
    assert result["verdict"] == "vanishing_gradient" and result["onset_step"] == 1, result["findings"]


def test_a_loss_near_ln2_that_falls_steadily_is_learning():
    # a DPO loss starts at ln 2 (the policy is its reference) and falls 0.691 -> 0.677 over 16
    # records, a little every record: slow learning, not a loss stuck at the prior
    loss = 0.6915 - 0.0009 * np.arange(16) + 0.0003 * np.sin(np.arange(16))
    assert "loss_at_chance" not in _rules(_run(loss, first=1, every=1))


def test_a_log_that_opens_late_in_a_run_is_not_read_from_the_run_start():
    # a flat loss over 14 records is no never-learning run when its epoch counter says the log opens
    # two-thirds into the run (the steps count from the log's own start)
    rng = np.random.default_rng(5)
    steps = list(range(1, 15))
    loss = 0.915 + 0.008 * rng.standard_normal(14)
    epoch = 0.6623 + 0.00227 * np.arange(14)
    series = {"loss": dict(zip(steps, loss.tolist())), "epoch": dict(zip(steps, epoch.tolist())),
              "grad_norm": dict(zip(steps, (0.7 + 0.1 * rng.random(14)).tolist()))}
    assert diagnose_series(series)["verdict"] == "healthy"
    from_start = {**series, "epoch": dict(zip(steps, (0.00227 * np.arange(1, 15)).tolist()))}
    assert diagnose_series(from_start)["verdict"] == "vanishing_gradient"
