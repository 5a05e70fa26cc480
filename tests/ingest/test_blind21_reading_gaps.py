"""Reading gaps blind21 showed (made-up logs of the same shapes): a CSV whose column names are padded
to a width (YOLOv5/v8's results.csv), JSON lines that count iterations within each epoch
(OpenMMLab's ``*.log.json``), and an environment-step column named ``timestep``."""

from __future__ import annotations

import json

from moeproxy.ingest import parse_file


def _by_metric(parsed):
    frame = parsed.frame
    return {m: dict(zip(g["step"], g["value"])) for m, g in frame.groupby("metric", observed=True)}


def test_a_csv_with_padded_column_names_steps_by_its_epoch(tmp_path):
    log = tmp_path / "results.csv"
    head = ",".join(f"{n:>24}" for n in ("epoch", "train/box_loss", "metrics/mAP50(B)", "lr/pg0"))
    rows = [",".join(f"{v:>24}" for v in (e, 0.9 - e / 100, e / 50, 1e-3)) for e in range(1, 31)]
    log.write_text("\n".join([head, *rows]) + "\n")
    parsed = parse_file(log)
    metrics = _by_metric(parsed)
    assert not parsed.step_from_index
    assert sorted(metrics["train/box_loss"]) == list(range(1, 31))
    assert "epoch" not in metrics


def test_iterations_counted_within_each_epoch_run_on_across_epochs(tmp_path):
    log = tmp_path / "20210218_222702.log.json"
    lines = [json.dumps({"env_info": "sys.platform: linux", "seed": 0})]
    for epoch in (1, 2, 3):
        for it in range(50, 501, 50):
            lines.append(json.dumps({"mode": "train", "epoch": epoch, "iter": it, "lr": 0.01,
                                     "loss": 2.0 - epoch / 10 - it / 5000}))
        lines.append(json.dumps({"mode": "val", "epoch": epoch, "iter": 619, "bbox_mAP": 0.1 * epoch}))
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    loss = _by_metric(parsed)["loss"]
    # epoch 1 keeps its own iterations (a reader dates an epoch-1 failure by them); epoch 2 goes on
    # from the last training iteration of epoch 1
    assert sorted(loss)[:10] == list(range(50, 501, 50))
    assert sorted(loss)[10:12] == [550, 600] and max(loss) == 1500
    assert len(loss) == 30
    # a resumed run (the iteration and the epoch both go back) is not read this way
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_text("\n".join(json.dumps({"epoch": e, "iter": i, "loss": 1.0})
                                 for e, i in [(1, 50), (1, 100), (2, 50), (1, 50), (1, 100)]) + "\n")
    assert sorted(set(_by_metric(parse_file(resumed))["loss"])) == [50, 100]


def test_a_timestep_column_is_the_step(tmp_path):
    log = tmp_path / "policy_training_progress.csv"
    rows = ["alpha,eval/episode_reward,loss/critic1,timestep"] + [
        f"0.5,{s / 100},{10 - s / 100},{s * 1000}" for s in range(1, 21)]
    log.write_text("\n".join(rows) + "\n")
    parsed = parse_file(log)
    assert not parsed.step_from_index
    assert sorted(_by_metric(parsed)["loss/critic1"]) == [s * 1000 for s in range(1, 21)]


def test_rllib_learner_stats_of_any_policy_are_known():
    from moeproxy.ingest.names import canonical_of

    assert canonical_of("info/learner/ue/entropy")[0] == "policy_entropy"
    assert canonical_of("info/learner/default_policy/learner_stats/entropy")[0] == "policy_entropy"
    assert canonical_of("info/learner/default_policy/kl")[0] == "ppo_kl"   # PPO's new-vs-old KL there
    assert canonical_of("info/learner/ue/entropy_coeff") is None


def test_keras_epochs_among_other_lines_are_found(tmp_path):
    # blind22: a README pasting Keras' console output, each epoch's metrics on the line after its
    # ``Epoch n/N`` line, among start-up lines and warnings that outnumber the metric lines
    lines = ["python3 train.py", "Using device: /CPU:0"]
    for run in range(3):
        lines += [f"Loading {5912 + run} training pairs...", "Loading 1478 validation pairs...", "",
                  f"Training config {run} on /CPU:0..."]
        for epoch in range(1, 6):
            lines += [f"Epoch {epoch}/5",
                      f"370/370 \u2501\u2501\u2501\u2501\u2501\u2501 4287s 12s/step - accuracy: 0.{epoch}026 - loss: "
                      f"{0.9 - epoch / 10:.4f} - val_accuracy: 0.0037 - val_loss: 0.8{epoch}"]
        lines += ["WARNING:absl:You are saving your model as an HDF5 file via `model.save()`. This file format "
                  "is considered legacy.", "Model saved."]
    log = tmp_path / "README.md"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    assert parsed.format == "text"
    assert set(_by_metric(parsed)["loss"]) == {1, 2, 3, 4, 5}


def test_baselines_ppo2_update_count_is_reported_beside_the_onset(tmp_path):
    from moeproxy.diagnose.evaluation import diagnose_path

    log = tmp_path / "progress.csv"
    rows = ["eprewmean,nupdates,policy_entropy,total_timesteps"]
    for u in range(1, 61):
        entropy = 2.5 if u < 30 else 2.5 * 0.85 ** (u - 29)
        rows.append(f"{0.1 + 0.001 * (u % 3)},{u},{entropy},{u * 1024}")
    log.write_text("\n".join(rows) + "\n")
    res = diagnose_path(log)
    assert res["verdict"] == "entropy_collapse", res["findings"][:2]
    assert int(res["onset_counters"]["nupdates"]) == res["onset_step"] // 1024


def test_mmengine_lines_after_a_config_dump_of_dicts_are_the_records(tmp_path):
    # blind22: an mmdetection (mmengine) console log whose head is the config dump (Python dicts the
    # printed-dicts reader takes for records); the training lines count iterations within each epoch
    # and the validation lines their own batches
    head = ["env_cfg = dict(cudnn_benchmark=False, mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0))",
            "model = dict(type='CascadeRCNN', data_preprocessor=dict(type='DetDataPreprocessor', pad_size_divisor=32))"]
    head += ["    dict(type='LoadImageFromFile', backend_args=None),", "    dict(type='LoadAnnotations', with_bbox=True),",
             "    dict(type='Resize', scale=(1333, 800), keep_ratio=True),", "    dict(type='RandomFlip', prob=0.5),",
             "    dict(type='PackDetInputs'),", "train_pipeline = [", "]", ""] * 50
    lines = list(head)
    for epoch in range(1, 9):
        for it in (50, 100, 150):
            loss = 0.4 if epoch < 6 else 4.0
            lines.append(f"05/31 04:13:56 - mmengine - INFO - Epoch(train)  [{epoch}][{it:3d}/151]  lr: 1.0e-02  "
                         f"eta: 1:37:55  time: 1.6441  data_time: 0.0433  memory: 17594  loss: {loss + it / 1e4:.4f}  "
                         f"grad_norm: {2.0 if epoch < 6 else 400.0}")
        for it in (50, 100):
            lines.append(f"05/31 04:17:08 - mmengine - INFO - Epoch(val)  [{epoch}][{it:3d}/335]    eta: 0:00:43  "
                         f"time: 0.1538  data_time: 0.0097  memory: 17593")
        lines.append(f"05/31 04:18:00 - mmengine - INFO - Epoch(val) [{epoch}][335/335]  coco/bbox_mAP: 0.{epoch}")
    log = tmp_path / "train.txt"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_file(log)
    metrics = _by_metric(parsed)
    assert sorted(metrics["loss"]) == [(e - 1) * 151 + it for e in range(1, 9) for it in (50, 100, 150)]
    assert sorted(metrics["val/coco/bbox_map"]) == [(e - 1) * 151 + 150 for e in range(1, 9)]
