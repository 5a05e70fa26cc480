"""A reading blind50 showed wrong, made here (not copied): the training loss under TensorBoard's
``Loss/train`` (group, then split, as PyTorch's tutorial writes it) non-finite from its first record
is the computation overflowing from the start (LABELS.md), not a metric that was never computed."""

from __future__ import annotations

from moeproxy.ingest.names import canonical_of


def test_loss_slash_train_is_the_training_loss():
    assert canonical_of("Loss/train")[0] == "loss"
    assert canonical_of("Loss/val") is None or canonical_of("Loss/val")[0] != "loss"


def test_a_loss_slash_train_nan_from_its_first_record_is_overflow_from_the_start(tmp_path):
    from moeproxy.diagnose.record import diagnose_target

    log = tmp_path / "metrics.csv"
    log.write_text("step,Loss/train,lr\n" + "".join(f"{s},nan,0.001\n" for s in range(0, 750, 10)))
    _, result, _ = diagnose_target(str(log), db=":memory:")
    assert result["verdict"] == "overflow" and result["onset_step"] == 0
    assert not (result["data"].get("never_computed") or {})
