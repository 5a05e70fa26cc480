"""Rules met on blind53's logs, on series made here: a reward whose fall a blow-up finished, a loss
that drops to exactly 0 and stays (and the Trainer's NaN filter only where the Trainer's fractional
epoch is logged), an entropy frozen as Stable-Baselines prints it."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _critical(result: dict) -> set[str]:
    return {f["rule"] for f in result["findings"] if f["severity"] == "critical"}


def _sac(blowup_at: int, n: int = 520, seed: int = 5) -> dict:
    """A SAC run: the return climbs to ~600, then slides from step 250 and falls to ~25 by step 330;
    the critic's loss, ~1 before, climbs from ``blowup_at`` by orders of magnitude."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    reward = np.where(steps < 120, 20 + 5 * steps, 600.0)
    reward = np.where(steps >= 250, 600 - 250 * np.clip((steps - 250) / 30, 0, 1), reward)
    reward = np.where(steps >= 300, 350 - 325 * np.clip((steps - 300) / 30, 0, 1), reward)
    reward = reward + 8 * rng.standard_normal(n)
    critic = 1 + 0.2 * rng.random(n)
    critic = np.where(steps >= blowup_at, critic * 10.0 ** np.clip((steps - blowup_at) / 10, 0, 9), critic)
    return diagnose_series({"rollout/ep_rew_mean": dict(zip(steps.tolist(), reward.tolist())),
                            "train/critic_loss": dict(zip(steps.tolist(), critic.tolist()))})


def test_a_return_still_falling_when_the_critic_blew_up_fell_because_of_it():
    result = _sac(blowup_at=290)
    assert result["verdict"] == "divergence"
    assert 285 <= result["onset_step"] <= 295
    fall = [f for f in result["findings"] if f["category"] == "reward_collapse"]
    assert fall and all(f["severity"] == "warning" and f["rule"] == "fall_with_blowup" for f in fall)


def test_a_return_that_had_fallen_before_the_critic_blew_up_collapsed_first():
    result = _sac(blowup_at=370)
    assert result["verdict"] == "reward_collapse"
    assert 245 <= result["onset_step"] <= 310
    assert "value_loss_blowup" in _critical(result)


def _epochs(values, fractional: bool = False) -> dict:
    steps = range(1, len(values) + 1)
    series = {"loss": dict(zip(steps, values))}
    if fractional:
        series["epoch"] = {s: round(s * 0.37, 2) for s in steps}
    return diagnose_series(series)


def test_a_loss_that_drops_to_exactly_zero_and_stays_gives_no_gradient():
    # a triplet loss every triplet satisfies: 3278, 0, 778, then 0 on every epoch
    result = _epochs([3278.58, 0.0, 778.32] + [0.0] * 7)
    assert result["verdict"] == "vanishing_gradient" and result["onset_step"] == 4
    assert "loss_zero_to_end" in _critical(result)


def test_a_loss_that_converged_to_its_last_printed_digit_then_zero_is_healthy():
    result = _epochs([0.69, 0.4, 0.1, 0.02, 0.004, 0.0009, 0.0003, 0.0001] + [0.0] * 8)
    assert result["verdict"] == "healthy"


def test_the_trainers_nan_filter_zero_is_read_only_with_its_fractional_epoch():
    values = [2.1, 1.9, 1.8, 1.7, 1.65, 1.6, 1.58, 1.55] + [0.0] * 8
    assert "loss_zero_nan_filter" in _critical(_epochs(values, fractional=True))
    assert _epochs(values, fractional=True)["verdict"] == "overflow"
    assert "loss_zero_nan_filter" not in _critical(_epochs(values))


def _ppo(entropy: list[float]) -> dict:
    steps = range(1, len(entropy) + 1)
    rng = np.random.default_rng(2)
    return diagnose_series({"train/entropy_loss": dict(zip(steps, [-e for e in entropy])),
                            "train/approx_kl": dict(zip(steps, (1e-5 * rng.random(len(entropy))).tolist())),
                            "train/value_loss": dict(zip(steps, (3e9 + 1e9 * rng.random(len(entropy))).tolist()))})


def test_an_entropy_printed_with_three_digits_the_same_in_every_update_never_moved():
    result = _ppo([14.2] * 19)
    assert result["verdict"] == "vanishing_gradient"
    assert "entropy_frozen" in _critical(result)


def test_an_entropy_printed_with_two_digits_may_repeat_by_chance():
    assert "entropy_frozen" not in _critical(_ppo([1.4] * 19))



def test_a_loss_printed_zero_while_another_error_keeps_falling_is_no_vanished_gradient():
    # blind54: a Keras Levenberg-Marquardt step returns no loss (printed 0.0000e+00 from epoch 2)
    # while its mean squared error falls from 0.46 to 1e-7: the weights change
    steps = range(1, 41)
    mse = {s: 0.46 * 10.0 ** (-s / 6) for s in steps}
    loss = {s: (0.46 if s == 1 else 0.0) for s in steps}
    result = diagnose_series({"loss": loss, "mean_squared_error": mse})
    assert "loss_zero_to_end" not in _critical(result)
    assert "loss_zero_to_end" in _critical(diagnose_series({"loss": loss}))
