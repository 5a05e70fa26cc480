"""Shapes of real logs that blind40 showed misread, each made here (not copied): PyTorch's DCGAN
example's ``[epoch/E][batch/B]`` counters, a run's printed config dicts before its ``Epochs: N |
loss_train: X`` lines, and an image trainer's ``Test: [10/185]`` batch lines among its training lines."""

from __future__ import annotations

from moeproxy.diagnose.diagnosis import diagnose_frame
from moeproxy.ingest import parse_file
from moeproxy.ingest.names import canonical_of


def _series(parsed, name):
    frame = parsed.frame
    part = frame[frame.metric == name]
    return dict(zip(part.step, part.value))


def test_epoch_and_batch_fractions_side_by_side_run_on_across_epochs(tmp_path):
    # ``[0/20][10/32]``: read by its first fraction alone, every batch of an epoch fell on one step
    lines = [f"[{e}/5][{b}/32]\tLoss_D: {0.5 - 0.01 * e:.4f}\tLoss_G: {2.0 + 0.1 * b:.4f}\tD(x): 0.8"
             for e in range(5) for b in range(0, 32, 8)]
    log = tmp_path / "dcgan.log"
    log.write_text("\n".join(lines) + "\n")
    loss_g = _series(parse_file(log), "loss_g")
    assert sorted(loss_g) == [32 * e + b for e in range(5) for b in range(0, 32, 8)]
    assert loss_g[32 * 3 + 16] == 3.6
    assert canonical_of("loss_g")[0] == "loss"  # the generator's loss, as ``g_loss`` is


def test_config_dicts_do_not_hide_the_epoch_lines_after_them(tmp_path):
    config = "Training Parameters:\n {'batch_size': 48, 'nb_iter': 80, 'hidden_size': 352, 'dropout': 0.1}\n"
    epochs = "".join(f"Epochs: {e} | loss_train: {2.8 - 0.05 * e:.3f} ~ {4.0 - 0.07 * e:.3f} BPC | "
                      f"loss_val: {2.1 - 0.04 * e:.3f} ~ 3.035 BPC | elapsed: 785.1\n\n" for e in range(12))
    log = tmp_path / "enwik8.log"
    log.write_text(config * 3 + epochs)
    parsed = parse_file(log)
    assert parsed.format == "text"
    loss = _series(parsed, "loss_train")
    assert sorted(loss) == list(range(12)) and loss[4] == 2.6
    assert canonical_of("loss_train")[0] == "loss"


def test_test_batch_lines_are_not_the_training_loss(tmp_path):
    # training lines print a loss of exactly 0 (no gradient at all); the evaluation's batch lines,
    # counted by their own ``Test: [i/N]``, carry the evaluation loss: it must not fill the training
    # loss at the steps the two counters share
    lines = []
    for epoch in range(3):
        for b in range(0, 100, 10):
            lines.append(f"[2023-12-21 22:44:51 swin] (main.py 311): INFO Train: [{epoch}/150][{b}/100]\t"
                         f"eta 0:04:26 lr 0.000000\t wd 0.0500\ttime 0.2879 (0.2879)\tloss 0.0000 (0.0000)\t"
                         f"grad_norm 0.0000 (0.0000)\tmem 111MB")
        for b in range(0, 40, 10):
            lines.append(f"[2023-12-21 22:45:22 swin] (main.py 383): INFO Test: [{b}/40]\tTime 0.015 (0.015)\t"
                         f"Loss 0.3491 (0.3491)\tAcc@1 100.000 (100.000)\tMem 150MB")
    log = tmp_path / "swin.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert set(_series(parsed, "loss").values()) == {0.0}
    assert set(_series(parsed, "eval/loss").values()) == {0.3491}  # a held-out split, as every reader names one
    result = diagnose_frame(parsed.frame)
    assert result["verdict"] == "vanishing_gradient" and result["onset_step"] == 0, result["findings"]


def test_names_the_vocabulary_does_not_know_are_not_renamed_by_the_last_resort(tmp_path):
    # a winner that read only unknown names may yield to a reader of known ones, but not to the
    # template reader, which names each number by the word before it: ``Validation loss`` and
    # ``Best loss`` would both become one ``loss``
    log = tmp_path / "early_stopping.txt"
    log.write_text("".join(f"{e}\tValidation loss: {0.1 + 0.01 * e:.6f}\tBest loss: 0.100000\tAccuracy: {97 - e / 10:.2f}%\n"
                           for e in range(12)) + "Early stopping!\n")
    names = set(parse_file(log).frame.metric.unique())
    assert {"validation loss", "best loss"} <= names and "loss" not in names
