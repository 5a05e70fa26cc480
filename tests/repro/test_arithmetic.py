from moeproxy.repro import arithmetic


def test_splits_are_disjoint_and_cover_every_pair():
    train, evaluation = set(arithmetic.pairs("train")), set(arithmetic.pairs("eval"))
    assert not train & evaluation
    assert len(train) + len(evaluation) == arithmetic.MAX_OPERAND ** 2
    assert 0.05 < len(evaluation) / (len(train) + len(evaluation)) < 0.15


def test_reward_is_exact_match_of_the_sum():
    assert arithmetic.reward("37+58=", "95") == 1.0
    assert arithmetic.reward("37+58=", " 95 ") == 1.0
    assert arithmetic.reward("37+58=", "96") == 0.0
    assert arithmetic.reward("37+58=", "") == 0.0
    assert arithmetic.reward("garbage", "95") == 0.0
