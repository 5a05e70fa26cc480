"""Readings blind21's misses asked for, each on a made-up log of the shape: a new-vs-old KL that
spikes out of the trust region for a few updates as the return falls for good (the update that broke
the policy); a KL spike that comes back to a few times its early level is no lasting rise; lone grad
norm spikes of a supervised run whose loss is unmoved are spikes; an offline critic's Q-value blow-up
beside an evaluation return only; a spread of an evaluation return is not the return."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _ppo(n=48, blowup_at=25, spike_at=12, seed=0):
    rng = np.random.default_rng(seed)
    kl = 0.03 * np.exp(rng.normal(0, 0.3, n))
    kl[8:blowup_at] *= 7                                  # a few times its early level for a while
    kl[spike_at] = 110.0                                  # one update out of the region, then back
    kl[blowup_at:blowup_at + 6] = [1300, 87000, 26000, 7000, 2800, 3000]
    reward = np.r_[np.linspace(20, 48, blowup_at), np.full(n - blowup_at, -9.5)] + rng.normal(0, 2, n)
    reward[spike_at] = 14.0                              # the spike's return dips once and comes back
    steps = np.arange(1, n + 1) * 20480
    return {"ppo_kl": dict(zip(steps, kl)), "reward_mean": dict(zip(steps, reward)),
            "loss": dict(zip(steps, rng.normal(0, 0.05, n)))}, steps


def test_a_kl_spike_out_of_the_trust_region_with_the_return_falling_for_good_is_divergence():
    series, steps = _ppo()
    res = diagnose_series(series)
    assert res["verdict"] == "divergence" and res["onset_step"] == steps[25], res["findings"][:3]
    rules = {f["rule"] for f in res["findings"]}
    # six updates in a row out of the region are more than the few a spike may last (ppo_kl_stretch)
    assert "ppo_kl_stretch" in rules and "kl_rise" not in rules
    # a shorter burst (three updates) with the return holding: updates that came back, warnings only
    kl = dict(series["ppo_kl"])
    for s in steps[28:31]:
        kl[s] = 0.03
    series["ppo_kl"] = kl
    series["reward_mean"] = dict(zip(steps, np.linspace(20, 48, len(steps))))
    res = diagnose_series(series)
    assert res["verdict"] == "healthy", res["findings"][:3]
    assert any(f["rule"] == "ppo_kl_spike" for f in res["findings"])


def test_lone_grad_norm_spikes_of_a_supervised_run_whose_loss_is_unmoved_are_spikes():
    rng = np.random.default_rng(4)
    n = 2000
    loss = 1.2 + 0.6 * np.exp(-np.arange(n) / 150) + rng.normal(0, 0.05, n)
    grad = 7.0 * np.exp(rng.normal(0, 0.2, n))
    for at, size in ((173, 19584), (292, 9344), (899, 2592), (1124, 3440), (2222 % n, 2528)):
        grad[at] = size                                   # each back at the next step
    res = diagnose_series({"loss": loss, "grad_norm": grad})
    assert res["verdict"] == "healthy", res["findings"][:3]
    # the same spikes with the loss climbing for good after them: a blow-up
    climbing = loss.copy()
    climbing[900:] += np.linspace(0, 6, n - 900)
    assert diagnose_series({"loss": climbing, "grad_norm": grad})["verdict"] == "divergence"


def test_an_offline_critic_blowing_up_beside_an_evaluation_return_is_divergence():
    rng = np.random.default_rng(2)
    n = 200
    critic = np.r_[rng.normal(10, 1, 70), 10 * np.exp(np.linspace(0, 26, n - 70))]
    success = np.r_[np.clip(rng.normal(0.5, 0.2, 98), 0, 1), np.zeros(n - 98)]
    steps = np.arange(1, n + 1) * 1000
    res = diagnose_series({"loss/critic1": dict(zip(steps, critic)), "loss/critic2": dict(zip(steps, critic)),
                           "eval/episode_reward": dict(zip(steps, success)),
                           "eval/episode_reward_std": dict(zip(steps, np.r_[np.full(150, 0.3), np.zeros(50)]))})
    assert res["verdict"] == "divergence", res["findings"][:3]
    assert steps[60] <= res["onset_step"] <= steps[100]
    assert not any(f["metric"] == "eval/episode_reward_std" for f in res["findings"])


def test_a_policy_loss_blown_up_for_most_of_the_run_is_measured_against_its_start():
    rng = np.random.default_rng(6)
    n = 31
    # a REINFORCE loss on returns of -2e4 (|loss| ~5e5, signed), x200 from record 8 to the end while
    # the return falls x10: the median of |loss| is inside the blow-up
    loss = np.r_[rng.normal(0, 5e5, 8), -1.1e8 + rng.normal(0, 1e6, n - 8)]
    reward = np.r_[np.linspace(-4e4, -1.4e4, 7), np.full(n - 7, -1.9e5)] + rng.normal(0, 1e3, n)
    steps = np.arange(1, n + 1) * 50 - 1
    res = diagnose_series({"loss": dict(zip(steps, loss)), "reward_mean": dict(zip(steps, reward))})
    assert res["verdict"] == "divergence", res["findings"][:3]
    assert any(f["rule"] == "policy_loss_blowup" for f in res["findings"])


def test_a_grad_norm_is_read_from_the_end_of_the_lr_warm_up():
    rng = np.random.default_rng(8)
    n = 120
    steps = np.arange(1, n + 1) * 50
    lr = np.minimum(steps / 500, 1.0) * 0.01                       # linear warm-up over 500 iterations
    # tiny norms over the first updates of the ramp, then the run's usual level
    grad = np.where(steps <= 150, 0.05, 5.0) * np.exp(rng.normal(0, 0.2, n))
    loss = 3.4 + rng.normal(0, 0.05, n)
    grad[steps >= 1100] = 1e4 * np.exp(rng.normal(0, 0.3, int((steps >= 1100).sum())))
    loss[steps >= 1100] = 50 + rng.normal(0, 2, int((steps >= 1100).sum()))
    res = diagnose_series({"lr": dict(zip(steps, lr)), "grad_norm": dict(zip(steps, grad)),
                           "loss": dict(zip(steps, loss))})
    assert res["verdict"] == "divergence" and 1000 <= res["onset_step"] <= 1100, res["findings"][:3]
