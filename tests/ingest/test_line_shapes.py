"""The text reader parses a line shape once (``moeproxy.ingest.shapes``, ``formats.text.StepFinder``)
and still gives, line for line, what the parsers give on each line."""

import math
import random

from moeproxy.ingest import parse_file
from moeproxy.ingest.formats.text import StepFinder, extract_pairs, find_step, pairs_of_split
from moeproxy.ingest.prefixes import CLOCK, TIMESTAMP, without_timestamps
from moeproxy.ingest.shapes import ShapeCache


def _same(a, b):
    return list(a) == list(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a.values(), b.values()))


def _lines(n=400, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        loss = rng.choice([f"{rng.uniform(0, 9):.4f}", "nan", f"{rng.uniform(0, 9):.2f}", "inf"])
        out += [
            f"iter {i}: loss {loss}, time {rng.uniform(1, 99):.1f}ms, mfu {rng.uniform(0, 50):.2f}%",
            f"step={i} loss={loss} lr={rng.choice(['1e-4', '3e-05', '0.0001'])} top-1 acc: {rng.random():.3f}",
            f"Epoch: [{i // 50}/20] Iter [{i % 50:4d}/50] || Loss: {loss} || fc{i % 3}_norm: {rng.random():.2f}",
            f"| epoch {i // 100 + 1:3d} | {i % 100:5d}/  100 batches | lr 5.00 | loss {loss} | ppl {rng.uniform(1, 9e3):8.2f}",
            f"step {i} tokens {rng.randrange(1, 10**7):,} loss: {loss} val: loss = {rng.random():.3f}",
            f"Iteration {i // 10 + 1}/4, Step {i % 10 + 1}/10, reward: {rng.choice(['1.0', '0.5', '1.0'])}, kl: {rng.choice(['1.0', '0.25'])}",
            f"epoch {i} loss {loss} loss {loss}",  # the same value twice: no plan from that shape
        ]
    return out


def test_shape_cache_gives_what_the_parser_gives_line_for_line():
    for parse in (extract_pairs, pairs_of_split):
        cache = ShapeCache(parse)
        for line in _lines():
            assert _same(cache(line), parse(line)), line
        assert cache.by_shape > 1000  # most lines were answered by their shape


def test_a_key_with_a_digit_or_a_comma_number_is_never_taken_from_another_line():
    cache = ShapeCache(extract_pairs)
    lines = ["top-1 acc: 0.5 loss: 2.0", "top-5 acc: 0.7 loss: 1.0", "top-1 acc: 0.6 loss: 3.0",
             "tokens 1,234 loss: 2.0", "tokens 5,678 loss: 2.0", "tokens 9,999 loss: 2.5",
             "tokens 12,34 loss: 2.0", "layer.0.weight: 0.5 layer.1.weight: 0.25", "model_v1.2 loss: 3.5"] * 3
    # a key with a number in it: the same shape once its numbers are set to 0, other keys
    lines += [f"mean reward (last {n}): {r}" for n, r in [(10, "5.0"), (10, "5.5"), (10, "6.0"), (100, "4.0"),
                                                         (100, "4.5"), (1000, "3.0")]]
    lines += [f"g_l{k}: {v}, g_l{3 - k}: {w}, fc{k}_norm: {v}" for k, v, w in [(1, "0.5", "0.7"), (2, "0.5", "0.7"),
                                                                         (1, "0.25", "0.5"), (2, "0.125", "0.5")]] * 2
    lines += [f"loss: {v} time {t}ms lr {lr}" for v, t, lr in [("2.5", "45.6", "1e-4"), ("2.25", "145.75", "1.5e-05"),
                                                             ("2.125", "5.5", "3e-05"), ("nan", "45.5", "3e-05")]]
    for line in lines:
        assert _same(cache(line), extract_pairs(line)), line


def test_numbers_of_any_length_share_a_shape():
    cache = ShapeCache(extract_pairs)
    lines = [f"12.{i}s/it - Step: {i}, LR: {1.93 / (i + 1)!r}e-05, Loss: {600.0 + i / 7!r}" for i in range(1, 300)]
    for line in lines:
        assert _same(cache(line), extract_pairs(line)), line
    assert cache.by_shape > 250  # float reprs of 15-17 digits: one shape


def test_step_finder_reads_counters_that_run_on_across_epochs():
    finder = StepFinder()
    for line in _lines(seed=1):
        assert finder(line) == find_step(line), line
    # the batch counter of ``| epoch N | i/100 batches |`` runs on across epochs: the same shape,
    # other steps (the value is read from the line, never from the shape)
    assert finder("| epoch   3 |    10/  100 batches | loss 2.0")[0] == 210
    assert finder("| epoch   4 |    10/  100 batches | loss 2.0")[0] == 310
    assert len(finder.paths) >= 5


def test_timestamps_removed_as_one_substitution_removes_them():
    rng = random.Random(2)
    alphabet = "0123456789:-[] T_.,Z+xs"
    lines = ["2025-06-12 13:31:13,075 - INFO - step 3 loss 2.0 at 12:00:01 and [2024-01-01T00:00:00Z]",
             "x12:34:56 12:34:56.789 [12:34:56] 2025-06-12_13:31:13+08:00 loss 1"]
    lines += ["".join(rng.choice(alphabet) for _ in range(rng.randint(5, 60))) for _ in range(20000)]
    for line in lines:
        want = TIMESTAMP.sub(" ", line) if CLOCK.search(line) else line
        assert without_timestamps(line) == want, line


def test_a_long_log_reads_the_same_record_by_record(tmp_path):
    lines = [f"2025-06-12 13:31:{i % 60:02d},075 - INFO - Epoch: [{i // 100}/9] Iter [{i % 100:4d}/100] || "
             f"lr: {0.01 * (1 - i / 1000):.8f} || Loss: {2.0 / (1 + i / 50):.4f}" for i in range(1000)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    rows = parse_file(path).rows.to_frame()
    loss = rows[rows.metric == "loss"].set_index("step").value
    assert len(loss) == 1000
    for i in (0, 1, 99, 100, 101, 999):
        assert loss[i] == float(f"{2.0 / (1 + i / 50):.4f}")
