"""Reading gaps found on blind35's logs (after their first-sight score): a metric's mean under its
own name, and Keras fitting one epoch at a time under a loop's own epoch line."""

from __future__ import annotations

from moeproxy.diagnose import diagnose_frame
from moeproxy.ingest import parse_file
from moeproxy.ingest.names import canonical_of


def test_a_metrics_mean_under_its_own_name_is_that_metric():
    assert canonical_of("grad_norm_mean")[0] == "grad_norm"
    assert canonical_of("kl/mean")[0] == "kl"
    # a listed name keeps its own meaning, and an unknown stem stays unknown
    assert canonical_of("reward_mean") == ("reward_mean", -1)
    assert canonical_of("lr_mean") is None and canonical_of("val_primary_mean") is None


def test_keras_fitting_one_epoch_at_a_time_counts_the_loops_epochs(tmp_path):
    lines = []
    for epoch, loss in enumerate([1.9895, 1.6382, 1.5460, 1.4973, 1.4682, 1.45, 1.44, 1.43, 1.6, 4.7, 12.6, 14.6], 1):
        lines += [f"epoch {epoch}", "Epoch 1/1", f"200278/200278 [==============================] - 126s - loss: {loss}",
                  '--- Generating with seed: "h they inspire." or, as la', "------ temperature: 0.2",
                  "the sense of the say the same of the antimated"]
    log = tmp_path / "lstm.txt"
    log.write_text("\n".join(lines) + "\n")
    frame = parse_file(log).frame
    loss = frame[frame.metric == "loss"]
    assert sorted(loss.step) == list(range(1, 13))
    result = diagnose_frame(frame)
    assert result["verdict"] == "divergence" and result["onset_step"] == 9
