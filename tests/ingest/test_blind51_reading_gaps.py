"""Counters blind51's logs carried that the text reader missed (read since its first-sight score)."""

from moeproxy.ingest import parse_file


def _loss(path):
    rows = parse_file(path).rows.to_frame()
    return rows[rows.metric == "loss"].set_index("step").value


def test_steps_opening_a_quoted_line_is_the_step(tmp_path):
    # an issue's pasted output: ``steps N`` opens each line (quoted with ``>``), an excerpt of the
    # start and one of the end; the step is that counter, not the record's index
    text = "When I started training, the output is:\n"
    text += "".join(f"> steps {s}, seconds for 100 batch: 45.9 , loss: {8.4 - s / 1000:.6f}\n" for s in range(100, 600, 100))
    text += "\nHowever, at about 8400 iters:\n"
    text += "".join(f">steps {s}, seconds for 100 batch: 57.8 , loss: {v}\n"
                    for s, v in [(8200, "7.064022"), (8300, "6.479928"), (8400, "nan"), (8500, "nan")])
    path = tmp_path / "pasted.txt"
    path.write_text(text)
    loss = _loss(path)
    assert list(loss.index) == [100, 200, 300, 400, 500, 8200, 8300, 8400, 8500]
    assert loss[8300] == 6.479928


def test_total_steps_in_prose_is_no_counter(tmp_path):
    text = "Max steps 5000, batch size: 32, lr: 0.001\n"
    text += "".join(f"iter {i}: loss {2.0 - i / 100:.3f}, lr 0.001\n" for i in range(1, 21))
    path = tmp_path / "train.log"
    path.write_text(text)
    loss = _loss(path)
    assert list(loss.index) == list(range(1, 21))


def test_a_keras_bar_without_its_epoch_line_counts_samples_seen(tmp_path):
    text = "".join(f"{n:5d}/60000 [{'=' * (n * 30 // 60000)}>{'.' * (29 - n * 30 // 60000)}] - ETA: 2s - loss: 2.30{i % 10}"
                   f" - accuracy: 0.1{i % 10}\n" for i, n in enumerate(range(32, 16000, 1216)))
    path = tmp_path / "keras.txt"
    path.write_text(text)
    loss = _loss(path)
    assert loss.index[0] == 32 and loss.index[1] == 1248
    assert len(loss) == len(range(32, 16000, 1216))


def test_a_keras_bar_under_its_epoch_line_still_runs_on_across_epochs(tmp_path):
    text = ""
    for epoch in (1, 2):
        text += f"Epoch {epoch}/2\n"
        text += "".join(f"{b:3d}/100 [{'=' * (b // 10)}>{'.' * (10 - b // 10)}] - ETA: 1s - loss: {1.0 / (epoch * b):.4f}\n"
                        for b in range(10, 100, 10))
        text += "100/100 [==========] - 2s 20ms/step - loss: 0.0100 - val_loss: 0.0200\n"
    path = tmp_path / "keras.log"
    path.write_text(text)
    loss = _loss(path)
    assert 110 in loss.index and 190 in loss.index  # epoch 2's batches after epoch 1's 100
