"""What blind52's logs carried that the text reader misread (read since its first-sight score)."""

from moeproxy.ingest import parse_file


def test_a_batch_fraction_and_an_epoch_beside_a_named_step_are_no_part_of_a_metric_name(tmp_path):
    # a speech GAN's log: the iteration is the step; the batch's place and the epoch printed after it
    # were read into the first metric's name (a new name on every line, 21,000 of them)
    text = "".join(f"(Iter {i}) Batch {i}/192960 (Epoch 1) d_real:0.{i % 97:04d}, d_fake:0.1554, g_adv:0.7527, "
                   f"g_l1:2.6033 l1_w: 100.00, btime: 0.3810 s, mbtime: 0.5570 s\n" for i in range(50, 5050, 50))
    path = tmp_path / "train.txt"
    path.write_text(text)
    rows = parse_file(path).rows.to_frame()
    assert set(rows.metric) == {"d_real", "d_fake", "g_adv", "g_l1", "l1_w", "btime", "mbtime"}
    d_real = rows[rows.metric == "d_real"].set_index("step").value
    assert list(d_real.index[:3]) == [50, 100, 150] and d_real[100] == float(f"0.{100 % 97:04d}")
