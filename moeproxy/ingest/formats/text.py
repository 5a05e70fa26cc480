"""The generic text-log parser for the long tail of trainers.

A metric line carries a step counter (``step 12``, ``iter 12:``, ``Iter 12:``, ``iteration=12``,
``global_step: 12``, a tqdm ``12/1000 [``) and ``key: value``, ``key=value`` or ``key value``
pairs: nanoGPT ``iter 100: loss 2.34, time 45.6ms, mfu 12.3%``, torchtitan
``step:  1  loss:  8.1  memory: 2.3GiB(3%)``, mlx-lm ``Iter 10: Train loss 2.345, Learning Rate
1.0e-05``, ``step=5 loss=2.1 gnorm=0.8``, tqdm ``450/1000 [01:23<01:40, loss=2.3]``. Timestamps
and rank prefixes are tolerated; keys are lower-cased. A file with no step counter but an epoch
counter (``epoch: 3 loss: 1.2 acc: 0.5``) uses the epoch as the step. When no line has a counter,
lines with at least two numeric pairs are records and their index is the step; a log of one metric
a line (``Mean Reward: 70.3``, the same key on at least 8 lines and most of those holding one pair)
is read the same way. A loss scaler's
overflow line without a counter (``moeproxy.ingest.events``) is one skipped update, stored at the
step being attempted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from moeproxy.ingest.events import NONFINITE_CRASH, bar_step, overflow_record
from moeproxy.ingest.names import canonical_of, guess_framework
from moeproxy.ingest.prefixes import GLOG_PREFIX, RANK_PREFIX, rank_of, without_timestamps
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.shapes import ShapeCache, shape_of
from moeproxy.ingest.source import HEAD_BYTES, SourceFile
from moeproxy.ingest.table import EpochSteps, LogTable, counts_within_epochs
from moeproxy.ingest.values import NONFINITE_WORDS
from moeproxy.vocabulary import is_validation_loss, split_prefix

STEP = re.compile(
    r"(?<![\w/])(?:global[_ ]step|train[_/]step|num_updates|steps(?=\s*[:=])|^[\s>]*steps(?=\s+\d)|step|iteration|iter|it)"
    r"\s*[:=#]?\s*\[?(\d+)\]?"
    r"(?:\s*/\s*\d+)?(?![\w.%])",  # (``Steps:   0%|`` is a bar's percentage, no counter; ``steps 100,``
    # opening a line, perhaps quoted, counts: ``Total steps 5000`` in prose does not)
    re.IGNORECASE,
)
# a tqdm bar: ``| 5/300 [`` or, drawn without its bar (no terminal), ``  1% 1/184 [``
TQDM = re.compile(r"(?:\||\d%)\s*(\d+)/(\d+)\s*\[")
# PyTorch Lightning's progress bar, ``Epoch 3:  9%|▉    | 66/704 [00:30<04:54, 2.17it/s, train_loss=4.6]``:
# the bar counts the batches of the epoch it names (from 0), so the step runs on across epochs
LIGHTNING_BAR = re.compile(r"(?<![\w/])Epoch (\d+):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")
# mmengine (xtuner, mmdet): ``Epoch(train) [2][200/735]`` (epoch, iteration in it) or ``Iter(train) [240/3000]``
MMENGINE_TIMINGS = frozenset({"eta", "time", "data_time", "memory"})
MMENGINE = re.compile(r"\b(?:Epoch|Iter)\((?:train|val|test)\)\s*(?:\[\s*(\d+)\s*\])?\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")
# a progress fraction in brackets, ``(7000/293491)`` or ``[240/3000]``, is the step where no named
# counter is (``Epoch:[0/2](7000/293491) loss:4.29``); an epoch's own fraction is not
PROGRESS = re.compile(r"(?<![\w/.])[(\[]\s*(\d+)\s*/\s*(\d+)\s*[)\]]")
# two of them side by side, ``[3/20][10/32]``: the epoch and the batch within it (PyTorch's DCGAN
# example, epochs from 0): the step runs on across the epochs
NESTED_PROGRESS = re.compile(r"(?<![\w/.])\[\s*(\d+)\s*/\s*\d+\s*\]\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")
EPOCH_BEFORE = re.compile(r"epoch\s*[:=#]?\s*$", re.IGNORECASE)
# an epoch counter with the batch fraction inside it (1-based epochs, as mmengine counts them)
EPOCH_BATCHES = re.compile(r"(?<![\w/])epoch\s*[:=#]?\s*(\d+)\s*[|,]?\s*(\d+)\s*/\s*(\d+)\s*(?:batch|iter|step)",
                           re.IGNORECASE)
# a progress fraction that opens a line (after tags in brackets) and a separator follows
# (``12/100 | loss=0.1``, ELECTRA's ``26/1000000 = 0.0%, SPS: 0.4 ... - loss: 47.1``)
# or an epoch in parentheses (``1920/191900 (epoch 1) loss: 8.237``)
PAREN_EPOCH = re.compile(r"^\s*\(\s*epoch\s*\d+\s*\)", re.IGNORECASE)  # its ``(epoch 1)``, not a metric
LEADING_FRACTION = re.compile(r"^\s*(?:\[[^\]\n]{1,60}\]\s*)*(\d+)\s*/\s*(\d+)\s*(?=[|=,:(]|-\s)")
# a batch counter with its total (``Batch 706/56191 - Loss: nan``); a bare ``batch 32`` may be a size
BATCH_FRACTION = re.compile(r"(?<![\w/])batch\s*[:#]?\s*(\d+)\s*/\s*\d+(?![\w.])", re.IGNORECASE)
# Keras prints the epoch on a line of its own (``Epoch 34/400``) and the epoch's metrics on the
# progress line after it (``50000/50000 [====] - 455s - loss: 2.3030 - val_loss: 2.3026``)
# ``<step> <name> <value>`` lines (build-nanogpt's ``0 train 10.955010``, ``0 val 10.9522``, ``0
# hella 0.2487``): a split's name alone is that split's loss
STEP_NAME_VALUE = re.compile(r"^\s*(\d+)\s+([A-Za-z_][\w./\-]*)\s*[:=]?\s+(" + r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|"
                             r"[-+]?(?:nan|inf(?:inity)?)" + r")\s*$", re.IGNORECASE)
SPLIT_LOSS = {"train": "loss", "training": "loss", "val": "val: loss", "valid": "val: loss",
              "validation": "val: loss", "eval": "eval: loss", "test": "test: loss"}
# Keras' progress bar inside an epoch (``  4/469 ━━━━━━━━━━━━━━━━━━━━  8s 17ms/step - loss: 0.1 -
# moe_loss: 11.5``, Keras 2's ``[====>.....]``; ``verbose=2`` prints no bar: ``625/625 - 2s - loss: 0.69``):
# the batch within the epoch its ``Epoch 1/20`` line names
KERAS_BAR = re.compile(r"^\s*(\d+)/(\d+)\s+(?:\[[=>.]*\]|━+|(?=-\s+\d+(?:\.\d+)?m?s\b))")
# a counter that opens a line closed by a full stop (``Epoch 0. Train Loss: 2.30``), not a decimal point
COUNTER_FULL_STOP = re.compile(r"^(\s*(?:epoch|step|iter|iteration|episode|update)\s*\d+)\.\s+(?=[A-Za-z])", re.IGNORECASE)
EPOCH_HEADER = re.compile(r"^\s*epoch\s+(\d+)\s*(?:/\s*(\d+))?\s*$", re.IGNORECASE)
# a counter on a line of its own, perhaps framed (``********** Iteration 3 **********``, ``=== Step 200 ===``):
# the ``key : value`` lines after it, one pair a line, are that step's record (Berkeley's RL homework logger)
# (an episode counter so framed, ``Episode:  3`` between ``=====`` rules: a notebook printing one episode a block)
STEP_HEADER = re.compile(r"^[\s*=#~_-]*(?:iteration|iter|step|update|timesteps?|episode)\s*[:#]?\s*(\d+)(?:\s*/\s*\d+)?[\s*=#~_-]*$",
                         re.IGNORECASE)
# an epoch counter is the step only in a file that has no other counter (Keras-style epoch logs)
EPOCH = re.compile(r"(?<![\w/])epochs?\s*[:=#]?\s*\[?(\d+)\]?(?:\s*/\s*\d+)?(?![\w.])", re.IGNORECASE)
EPISODE = re.compile(r"(?<![\w/])episodes?\s*[:=#]?\s*\[?(\d+)\]?(?:\s*/\s*\d+)?(?![\w.])", re.IGNORECASE)
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)(?![a-z])"
# a number is taken whole or not at all: ``3e`` (of ``3e-4``) or ``1.2.3`` is no number, never ``3``
# or ``1.2`` (units may follow: ``45.6ms``, ``12.3%``)
NUMBER_END = r"(?![eE.\d])"
# a progress fraction and one bare value, nothing else on the line (``  10000/ 200000: 2.0576``, the loop
# of Karpathy's makemore and its many copies): the value is the one thing the loop reports, its loss
FRACTION_BARE_VALUE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*:\s*(" + NUMBER + r")" + NUMBER_END + r"\s*$", re.IGNORECASE)
# below a counter on a line of its own, a line that is a name and one number with only a space
# between (``mean reward (100 episodes) -20.187500``, ``episodes 64``: the Berkeley deep-RL homework's
# DQN log) is one pair; elsewhere such a line is prose
BARE_PAIR = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_ ()/%.,-]{0,60}?[A-Za-z)])\s+(" + NUMBER + r")" + NUMBER_END + r"\s*$",
                       re.IGNORECASE)
# Pairs are found in time linear in the line (a 1 MB line of hostile repeats included): from each
# separator that a number follows, back to its key; a regex that looks for the key first rescans a
# long run of key characters from each of them (a 30 KB line took 15 s).
# ``key=number``: found by ``eq_pairs`` from each ``=`` back to its key
VALUE_AFTER_EQ = re.compile(r"=\s*\[?(" + NUMBER + r")" + NUMBER_END, re.IGNORECASE)
EQ_KEY_CHARS_REVERSED = re.compile(r"[\w./@\-]*")
KEY_COLON = re.compile(r"^([A-Za-z_][\w./@\-() ]*?)\s*:\s*\[?(" + NUMBER + r")" + NUMBER_END, re.IGNORECASE)
# several ``key: value`` pairs in one single-spaced segment (``epoch: 3 loss: 1.2 acc: 0.5``): found
# by ``colon_pairs``, from each colon that a number follows back to its key
VALUE_AFTER_COLON = re.compile(r":\s*\[?(" + NUMBER + r")(?![\w.])", re.IGNORECASE)
KEY_CHARS_REVERSED = re.compile(r"[\w./@\-() ]*")
KEY_START = re.compile(r"[A-Za-z_]")
KEY_SPACE = re.compile(r"^([A-Za-z_][\w./@\- ]*?[A-Za-z_)])\s+\[?(" + NUMBER + r")" + NUMBER_END, re.IGNORECASE)
# ``name[value]``: TensorFlow's ``tf.Print`` (``CrossE[472.02966]``), one value in the brackets; an
# integer there is an index (``sample[0]``, ``gen[3]``), no value
BRACKET_VALUE = re.compile(r"^([A-Za-z_][\w./\-]*)\[\s*([-+]?(?:\d*\.\d+|\d+\.\d*|\d+(?=[eE]))(?:[eE][-+]?\d+)?|"
                           r"[-+]?(?:nan|inf(?:inity)?))\s*\]$", re.IGNORECASE)
# a value before its name, only for names that are known metrics (``9.12 loss``, not ``12 ms``)
VALUE_FIRST = re.compile(r"^(" + NUMBER + r")\s+([A-Za-z_][\w/]*)(?![\w.])", re.IGNORECASE)
# `` -- `` separates pairs too, and `` - `` before a key (``2:00:00 - loss: 8.9``, Keras' ``- loss: 2.3``)
SEGMENT_SPLIT = re.compile(r"\s*[,|;]\s*|\s*(?<!\S)-{2,}\s+|(?<=\S)\s+-\s+(?=[A-Za-z_])|\s{2,}|\t")
# a split tag before a record's pairs (``Step 14100 stats, val: loss = 3.32``): the record's
# metrics are that split's, not the training ones printed at the same step
# (its progress fraction, ``Test: [10/185]  Loss 0.3359``, already taken out as the step: a separator
# may stand between the tag and the pairs)
SPLIT_TAG = re.compile(r"(?<![\w/])(train(?:ing)?|val(?:id(?:ation)?)?|eval(?:uation)?|test)\s*:[\s,]*(?=[A-Za-z_])",
                       re.IGNORECASE)


def _number(text: str) -> float:
    low = text.lower()
    return NONFINITE_WORDS[low] if low in NONFINITE_WORDS else float(text)


THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
AFTER_SEPARATOR = re.compile(r"([:=])\s+")
DASH_BULLET = re.compile(r"^-\s+")  # a dash that separates pairs, not a minus sign


def _key_before(text: str) -> str | None:
    """The key that ends ``text`` (before a ``: value``): its longest tail of words of key
    characters separated by single spaces, each word starting with a letter or ``_``."""
    text = text.rstrip()
    n = KEY_CHARS_REVERSED.match(text[::-1]).end()
    words: list[str] = []
    for word in reversed(text[len(text) - n:].split(" ")):
        if word and KEY_START.match(word):
            words.append(word)
            continue
        m = KEY_START.search(word)  # a word that starts with a digit or '(' keys from its first letter
        if m:
            words.append(word[m.start():])
        break
    return " ".join(reversed(words)) or None


def _eq_key_before(text: str) -> str | None:
    """The single-word key that ends ``text`` (before an ``=value``), from its first letter
    (``--lr`` -> ``lr``)."""
    text = text.rstrip()
    run = text[len(text) - EQ_KEY_CHARS_REVERSED.match(text[::-1]).end():]
    first = KEY_START.search(run)
    return run[first.start():] if first else None


def _separated_pairs(segment: str, sep: str, value_after: re.Pattern, key_before) -> list[tuple[str, str]]:
    """(key, number text) of each ``key<sep>number`` in a segment, in one pass over the separators
    (a regex that looked for the key first rescanned the line per word): a key never crosses a
    separator or the pair before it."""
    pairs: list[tuple[str, str]] = []
    start = pos = 0
    while (at := segment.find(sep, pos)) >= 0:
        m = value_after.match(segment, at)
        key = key_before(segment[start:at]) if m else None
        if key:
            pairs.append((key, m.group(1)))
            start = pos = m.end()
        else:
            start = pos = at + 1
    return pairs


def eq_pairs(segment: str) -> list[tuple[str, str]]:
    """(key, number text) of each ``key=number`` in a segment (``epoch=0/micro_step=10`` too)."""
    return _separated_pairs(segment, "=", VALUE_AFTER_EQ, _eq_key_before)


def colon_pairs(segment: str) -> list[tuple[str, str]]:
    """(key, number text) of each ``key: number`` in a segment, keys of several words allowed."""
    return _separated_pairs(segment, ":", VALUE_AFTER_COLON, _key_before)


BARE_KEY = re.compile(r"[A-Za-z_][\w./@\-]*")
STARTS_WITH_NUMBER = re.compile(r"(?:" + NUMBER + r")" + NUMBER_END, re.IGNORECASE)


def _segments(text: str) -> list[str]:
    """The line cut at separators; a lone key whose value was aligned into the next segment by
    padding (llm.c's ``| loss     nan (+nanz)|``) is joined back to it."""
    parts = SEGMENT_SPLIT.split(text)
    out: list[str] = []
    for part in parts:
        if (out and BARE_KEY.fullmatch(out[-1].strip()) and STARTS_WITH_NUMBER.match(part.strip())
                and canonical_of(out[-1].strip().lower()) is not None):
            out[-1] = out[-1].strip() + " " + part.strip()
        else:
            out.append(part)
    return out


def extract_pairs(text: str) -> dict[str, float]:
    record: dict[str, float] = {}
    text = AFTER_SEPARATOR.sub(r"\1 ", THOUSANDS.sub("", text))
    for segment in _segments(text):
        m = BRACKET_VALUE.match(segment.strip())
        if m:
            record[m.group(1).lower()] = _number(m.group(2))
            continue
        segment = DASH_BULLET.sub("", segment.strip().strip("[]{}():").strip())  # `` - Loss: nan``
        if not segment:
            continue
        eq = eq_pairs(segment)
        if eq:
            for key, raw in eq:
                record[key.lower()] = _number(raw)
            continue
        run = colon_pairs(segment)
        if len(run) >= 2:
            for key, raw in run:
                record[" ".join(key.lower().split())] = _number(raw)
            continue
        m = KEY_COLON.match(segment) or KEY_SPACE.match(segment)
        if m:
            key = " ".join(m.group(1).lower().split())
            record[key] = _number(m.group(2))
            continue
        m = VALUE_FIRST.match(segment)
        if m and canonical_of(m.group(2).lower()) is not None:  # ``9.12 loss at iter 2140``
            record[m.group(2).lower()] = _number(m.group(1))
    return record


def pairs_of_split(text: str) -> dict[str, float]:
    """``extract_pairs``, with the pairs after a split tag other than training (``val: loss = 3.3``)
    named for it as every reader names them (``val/loss``: ``moeproxy.vocabulary.split_prefix``) so they do not overwrite the training loss; each tag names the pairs
    up to the next one (``train: loss=1.0, val: loss=2.0``)."""
    tags = list(SPLIT_TAG.finditer(text))
    if not tags:
        return extract_pairs(text)
    record = extract_pairs(text[: tags[0].start()])
    for tag, after in zip(tags, tags[1:] + [None]):
        prefix = split_prefix(tag.group(1)) or ""
        for key, value in extract_pairs(text[tag.end(): after.start() if after else len(text)]).items():
            record[key if key.startswith(prefix) else prefix + key] = value
    return record


def bare_pair(line: str) -> dict[str, float]:
    """``{name: value}`` of a line that is a name and one number (``BARE_PAIR``), else empty."""
    m = BARE_PAIR.match(line)
    return {m.group(1).strip(): float(m.group(2))} if m else {}


TRAILING_SHARE = 0.8  # a counter-less metric line is a step's when it follows this share of the steps
TRAILING_GAP = 3  # ... within this many unread lines of the step's record
TRAILING_MIN_EVALS = 3  # ... or a validation loss's line, after this many steps or more (one pass every k steps)


def _merge_trailing(entries: list, trailing: list, stepped: int) -> int:
    """Each counter-less one-metric line into the stepped record before it, for the names that
    follow at least ``TRAILING_SHARE`` of the steps (a line format of the run's own); the others
    (a rollout summary now and then, a number in printed model output) are skipped lines: returns
    how many."""
    per_name: dict[str, int] = {}
    for _, pair in trailing:
        name = next(iter(pair))
        per_name[name] = per_name.get(name, 0) + 1
    # (a validation loss follows every k-th step, a validation pass every k steps: it is the run's
    # own line whenever it comes at least ``TRAILING_MIN_EVALS`` times)
    regular = {name for name, n in per_name.items()
               if n >= TRAILING_SHARE * stepped or (is_validation_loss(name) and n >= TRAILING_MIN_EVALS)}
    left = 0
    for at, pair in trailing:
        if next(iter(pair)) in regular:
            entries[at][3].update(pair)
        else:
            left += 1
    return left


DS_ENGINE_STEP = re.compile(r"\bstep=\d+,\s*skipped=\d+")


SEPARATED_NUMBER = re.compile(r"[:=]\s*\[?[-+]?(?:\d|\.\d|nan|inf)", re.IGNORECASE)


def _known_pair(line: str, extract=extract_pairs) -> dict[str, float]:
    """``{name: value}`` of a line that is one ``name: value`` pair whose name the vocabulary knows.
    A line with two or more numbers after a ``:`` or ``=`` holds several pairs: not split into them
    (most lines after a step's record are other records)."""
    seps = SEPARATED_NUMBER.finditer(line)
    if next(seps, None) is not None and next(seps, None) is not None:
        return {}
    record = extract(line)
    if len(record) == 1 and (canonical_of(name := next(iter(record))) is not None or is_validation_loss(name)):
        return record
    return {}


GLOG_SEVERITIES = frozenset("IWEF")


# the bar that closed a timestamp prefix (rllab's ``2017-06-05 22:10:25 EDT | itr #0 | ...``)
TIMESTAMP_BAR = re.compile(r"^\s+\|\s")


def _strip(line: str) -> str:
    line = RANK_PREFIX.sub("", line, count=1)
    if ". " in line[:24]:
        # ``Epoch 0. Train Loss: 2.30, ...``: the counter closed by a full stop, as by a comma
        line = COUNTER_FULL_STOP.sub(r"\1, ", line, count=1)
    if line[:1] in GLOG_SEVERITIES or line[:1].isspace():
        line = GLOG_PREFIX.sub("", line, count=1)
    out = without_timestamps(line)
    if out != line and out[:1].isspace():
        # (a timestamp was taken from the line's start): its text starts after the bar, not at a bar
        # that opens a table's row
        out = TIMESTAMP_BAR.sub("", out, count=1)
    return out


def _may_count_steps(low: str) -> bool:
    """Whether ``STEP`` can match the lower-cased line: each of its names holds one of these."""
    return "it" in low or "step" in low or "num_updates" in low


# The ways a line names its step, in the order they are tried: each gives (step, the line with the
# counter removed), None, or the line rewritten for the ways after it (a tqdm bar whose description
# names the counter). Each pattern is searched for only in a line that holds a word it needs.

def _mmengine_step(line: str, low: str):
    m = MMENGINE.search(line) if "(t" in line or "(v" in line else None
    if m:  # by-epoch logs count iterations within the epoch: the step runs on across epochs
        epoch, it, per_epoch = int(m.group(1) or 1), int(m.group(2)), int(m.group(3))
        step = (epoch - 1) * per_epoch + it if m.group(1) else it
        return step, line[: m.start()] + " , " + line[m.end():]
    return None


def _epoch_batches_step(line: str, low: str):
    m = EPOCH_BATCHES.search(line) if "epoch" in low else None
    if m:  # PyTorch examples' ``| epoch   2 |   200/ 2983 batches |``: the batch counter restarts each epoch
        epoch, it, per_epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return max(epoch - 1, 0) * per_epoch + it, line[: m.start()] + " , " + line[m.end():]
    return None


def _lightning_step(line: str, low: str):
    m = LIGHTNING_BAR.search(line) if "%|" in line else None
    if m:
        epoch, it, per_epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return epoch * per_epoch + it, line[: m.start()] + " , " + line[m.end():]
    return None


def _tqdm_step(line: str, low: str):
    m = TQDM.search(line) if "[" in line else None
    if not m:
        return None
    before, rest = line[: m.start()], line[m.end():]
    if not (STEP.search(before) or EPOCH.search(before)):
        return int(m.group(1)), rest
    # a bar within an epoch or step that its description names (``Epoch: [7/400] Loss: nan: 100%|██| 469/469
    # [06:54<00:00]``): that counter dates the record, not the bar's position
    return before + " , " + rest


# counters printed beside a named step (``(Iter 50) Batch 50/192960 (Epoch 1) d_real:0.06``): a batch's
# place in the epoch and the epoch in parentheses are no metric, nor part of the next pair's name
BESIDE_STEP = re.compile(r"(?<![\w/])batch\s*[:#]?\s*\d+\s*/\s*\d+(?![\w.])|\(\s*epoch\s*\d+\s*\)", re.IGNORECASE)


def _named_step(line: str, low: str):
    hit = _counter(STEP, line) if _may_count_steps(low) else None
    if hit is not None and ("batch" in low or "epoch" in low):
        return hit[0], BESIDE_STEP.sub(" , ", hit[1])
    return hit


# ``epoch 0[4500], loss: 3.3``: the iteration in brackets right after the epoch is the step (the epoch
# stays in the record: a bracketed count that restarts with each epoch runs on across them)
EPOCH_ITERATION = re.compile(r"(?<![\w/])epoch\s*[:=#]?\s*(\d+)\s*\[\s*(\d+)\s*\]", re.IGNORECASE)


def _epoch_iteration_step(line: str, low: str):
    m = EPOCH_ITERATION.search(line) if "epoch" in low and "[" in line else None
    if m:
        return int(m.group(2)), f"{line[: m.start()]} , epoch {m.group(1)} , {line[m.end():]}"
    return None


def _nested_progress_step(line: str, low: str):
    m = NESTED_PROGRESS.search(line) if "[" in line else None
    if m:
        return int(m.group(1)) * int(m.group(3)) + int(m.group(2)), line[: m.start()] + " , " + line[m.end():]
    return None


def _progress_step(line: str, low: str):
    if "[" in line or "(" in line:
        for m in PROGRESS.finditer(line):
            if not EPOCH_BEFORE.search(line[: m.start()]):
                return int(m.group(1)), line[: m.start()] + " , " + line[m.end():]
    return None


def _leading_fraction_step(line: str, low: str):
    m = LEADING_FRACTION.match(line)
    if m:  # ``[job]   12/100 | loss=0.1 | reward=0.3``: the progress fraction that opens the line
        return int(m.group(1)), PAREN_EPOCH.sub(" , ", line[m.end():], count=1)
    return None


def _batch_fraction_step(line: str, low: str):
    m = BATCH_FRACTION.search(line) if "batch" in low else None
    if m:
        return int(m.group(1)), line[: m.start()] + " , " + line[m.end():]
    return None


def _name_value_step(line: str, low: str):
    return _step_name_value(line)


# every pattern up to ``_named_step`` needs a progress fraction: a line without ``/`` starts there (and
# skips the fraction patterns after ``_epoch_iteration_step``)
WITH_FRACTION = (_mmengine_step, _epoch_batches_step, _lightning_step, _tqdm_step, _named_step,
                 _epoch_iteration_step, _nested_progress_step, _progress_step, _leading_fraction_step, _batch_fraction_step,
                 _name_value_step)
WITHOUT_FRACTION = (_named_step, _epoch_iteration_step, _name_value_step)


def _walk_steps(line: str) -> tuple[tuple[int, str] | None, tuple[int, ...]]:
    """find_step's answer, and the indices (in its list of ways) of the ways that answered."""
    low = line.lower()
    ways = WITH_FRACTION if "/" in line else WITHOUT_FRACTION
    path: list[int] = []
    for i, way in enumerate(ways):
        out = way(line, low)
        if out is None:
            continue
        path.append(i)
        if isinstance(out, str):
            line = out
            continue
        return out, tuple(path)
    return None, tuple(path)


def find_step(line: str) -> tuple[int, str] | None:
    """(step, the line with the counter removed) or None."""
    return _walk_steps(line)[0]


MAX_STEP_SHAPES = 4096


class StepFinder:
    """``find_step``, remembering for each line shape (each run of digits set to one 0,
    ``shapes.shape_of``) which ways answered: the patterns see digits only as digits, in runs
    of any length, so a line of that shape is answered by the same ways, and the
    ways that did not answer need not be tried again (a 30,000-line log spent most of its reading
    in searches that could not match). Values are always read from the line itself."""

    def __init__(self):
        self.paths: dict[str, tuple[int, ...]] = {}

    def __call__(self, line: str) -> tuple[int, str] | None:
        shape = shape_of(line)
        path = self.paths.get(shape)
        if path is None:
            result, path = _walk_steps(line)
            if len(self.paths) < MAX_STEP_SHAPES:
                self.paths[shape] = path
            return result
        low = line.lower()
        ways = WITH_FRACTION if "/" in line else WITHOUT_FRACTION
        for i in path:
            out = ways[i](line, low)
            if out is None:  # (cannot happen for a shape's line; the whole walk is the answer then)
                return _walk_steps(line)[0]
            if isinstance(out, str):
                line = out
                continue
            return out
        return None


def _step_name_value(line: str) -> tuple[int, str] | None:
    m = STEP_NAME_VALUE.match(line)
    if m:
        name = SPLIT_LOSS.get(m.group(2).lower(), m.group(2))
        return int(m.group(1)), f"{name} {m.group(3)}"
    return None


def find_epoch(line: str) -> tuple[int, str] | None:
    """(epoch, the line with the counter removed) or None; a step only where no line has a step. An
    RL script's episode counter (``Episode 7 reward -14.000 eps 0.966``) counts its records as an
    epoch counter does, where the line names no epoch."""
    hit = _counter(EPOCH, line)
    if hit is None and (m := EPISODE.search(line)) and not any(c.isdigit() for c in line[:m.start()]):
        # (the record's first number: an episode count after another counter, PyMARL's ``t_env:
        # 10050 | Episode: 52``, is one of its stats)
        hit = _counter(EPISODE, line)
    return hit


COUNTER_TOTAL = re.compile(r"/\s*(\d+)$")


def _counter(pattern: re.Pattern, line: str) -> tuple[int, str] | None:
    """The first counter is the step; a second one (litgpt's ``iter 1152 step 144``: micro-iteration
    and optimizer step) is removed too, so it neither becomes a metric nor hides the next pair. Two
    counters that both name their totals are nested loops, the outer first (``Iteration 1/1, Step
    5/500``): the step runs on through the outer loop, (outer - 1) x inner total + inner, as the
    epoch and batch of ``EPOCH_BATCHES`` do."""
    m = pattern.search(line)
    if m:
        step = int(m.group(1))
        rest = line[m.end():]
        second = pattern.search(rest)
        if second:
            rest = rest[: second.start()] + " , " + rest[second.end():]
            outer, inner = COUNTER_TOTAL.search(m.group(0)), COUNTER_TOTAL.search(second.group(0))
            if outer and inner and 1 <= step <= int(outer.group(1)) and int(second.group(1)) <= int(inner.group(1)):
                step = (step - 1) * int(inner.group(1)) + int(second.group(1))
        return step, line[: m.start()] + " , " + rest
    return None


STEPPED, BY_EPOCH, INDEXLESS, EVENT, PENDING, CRASH = range(6)
SCALE_AFTER_EVENT = re.compile(r"^\s*using dynamic loss scale of\s*(\d+(?:\.\d*)?)\s*$", re.IGNORECASE)


def parse_text(src: SourceFile) -> ParsedLog:
    """Records in file order as (kind, counter, rank, record); which counter is the step (step
    counters, else epochs, else record indices) is decided at the end, and overflow events are
    placed among the records in the order they were printed."""
    skipped = 0
    entries: list[tuple[int, int | None, int, dict]] = []
    trailing: list[tuple[int, dict]] = []  # (index of the stepped entry before, its one known pair)
    unread_since_record = 0  # lines read as nothing since the last stepped record or its trailing pair
    counts = [0, 0, 0]
    header_epoch = header_step = None
    read_pairs, read_line = ShapeCache(pairs_of_split), ShapeCache(extract_pairs)  # a line shape parsed once
    step_of = StepFinder()
    for _, raw in src.lines():
        line = _strip(raw)
        header = EPOCH_HEADER.match(line)
        if header:
            if not (header.group(2) == "1" and header_epoch is not None):
                # (Keras' ``Epoch 1/1`` of a loop that fits one epoch at a time under its own
                # ``epoch 56`` line: the loop's count goes on)
                header_epoch = int(header.group(1))
            continue
        header = STEP_HEADER.match(line)
        if header:
            header_step = int(header.group(1))
            continue
        event = overflow_record(line)
        if event is not None:
            # an error that stopped the run on NaN/inf values: at the step under way, not one after it
            crash = NONFINITE_CRASH.search(line) is not None
            entries.append((CRASH if crash else EVENT, bar_step(line), rank_of(raw), event))
            continue
        scale = SCALE_AFTER_EVENT.search(line) if entries and entries[-1][0] == EVENT else None
        if scale:  # apex prints the new scale on the next line
            entries[-1][3]["deepspeed/reduced_loss_scale"] = float(scale.group(1))
            continue
        held_out = MMENGINE.search(line) if "/" in line and ("(t" in line or "(v" in line) else None
        if held_out and "(train)" not in held_out.group(0):
            # mmengine's validation / test lines count their own batches: they belong to the last
            # training step, their metrics (an mAP, beside timings) named as held-out ones
            last = next((entry for entry in reversed(entries) if entry[0] == STEPPED), None)
            record = read_pairs(line[: held_out.start()] + " , " + line[held_out.end():])
            record = {f"val/{k}": v for k, v in record.items() if k not in MMENGINE_TIMINGS}
            if last is not None and record:
                last[3].update(record)  # one record of that step, not a second attempt at it
            else:
                skipped += 1
            continue
        bare = FRACTION_BARE_VALUE.match(line) if "/" in line else None
        if bare:
            entries.append((STEPPED, int(bare.group(1)), rank_of(raw), {"loss": float(bare.group(3))}))
            counts[STEPPED] += 1
            unread_since_record = 0
            continue
        bar = KERAS_BAR.match(line)
        if bar and header_epoch is None and (record := read_pairs(line[bar.end():])):
            # Keras' bar with no ``Epoch 1/20`` line above it (a pasted part of one epoch): its count of
            # samples or batches seen is the step, as the bar prints it
            entries.append((STEPPED, int(bar.group(1)), rank_of(raw), record))
            counts[STEPPED] += 1
            unread_since_record = 0
            continue
        if bar and header_epoch is not None and int(bar.group(1)) == int(bar.group(2)) and (
                record := read_pairs(line[bar.end():])):
            # the epoch's closing bar (``2/2 ━━━━ 1s - loss: 0.4 - val_loss: 0.6``): the epoch's record,
            # read by epoch however many batch lines were printed before it (a batch's line left in
            # a pasted log by a warning printed into it, ``1/2 ━━ - loss: nan[WARNING] ...``); the
            # log is read by epoch when these outnumber the batch lines
            entries.append((BY_EPOCH, header_epoch, rank_of(raw), record))
            counts[BY_EPOCH] += 1
            continue
        if bar and int(bar.group(1)) < int(bar.group(2)) and (record := read_pairs(line[bar.end():])):
            # a batch's line within the epoch (its last, ``469/469``, is the epoch's summary, read by
            # epoch when the log prints nothing else): the batch counter runs on across the epochs
            record["epoch"] = header_epoch
            per_epoch = int(bar.group(2))
            entries.append((STEPPED, max(header_epoch - 1, 0) * per_epoch + int(bar.group(1)), rank_of(raw), record))
            counts[STEPPED] += 1
            unread_since_record = 0
            continue
        hit = step_of(line)
        if hit is not None:
            record = read_pairs(hit[1])
            if "skipped" in record and DS_ENGINE_STEP.search(line):
                # DeepSpeed's engine line counts the steps skipped since the start, as the Megatron
                # reader names it (``overflow`` reads it as a running count)
                record["deepspeed/skipped_total"] = record.pop("skipped")
            if record:
                entries.append((STEPPED, hit[0], rank_of(raw), record))
                counts[STEPPED] += 1
                unread_since_record = 0
                continue
        elif header_step is not None and (record := read_pairs(line) or bare_pair(line)):
            entries.append((STEPPED, header_step, rank_of(raw), record))
            counts[STEPPED] += 1
            unread_since_record = 0
            continue
        elif not counts[STEPPED] and (epoch := find_epoch(line)):
            record = read_pairs(epoch[1])
            if record:
                entries.append((BY_EPOCH, epoch[0], rank_of(raw), record))
                counts[BY_EPOCH] += 1
                continue
        elif not counts[STEPPED] and header_epoch is not None:
            record = read_pairs(line)
            if record:
                entries.append((BY_EPOCH, header_epoch, rank_of(raw), record))
                counts[BY_EPOCH] += 1
                continue
        elif not counts[STEPPED] and raw.strip():
            # read only if the file turns out to have no counted records: a long preamble before
            # them (tracebacks, environment dumps) is then not read pair by pair
            entries.append((PENDING, None, rank_of(raw), line))
            continue
        elif (unread_since_record <= TRAILING_GAP and entries and entries[-1][0] == STEPPED
              and (pair := _known_pair(line, read_line))):
            # one metric the vocabulary knows on a line just after a step's record (at most
            # ``TRAILING_GAP`` unread lines between), with no counter of its own (DeepSpeed-Chat's
            # ``average reward score: 0.19`` after ``epoch: 0|step: 2|act_loss: ...``): that step's,
            # when it follows (nearly) every step. A line further on is not looked at (a log of
            # thousands of other lines between its step records was read pair by pair for nothing)
            trailing.append((len(entries) - 1, pair))
            continue
        if raw.strip():
            skipped += 1
            unread_since_record += 1
    skipped += _merge_trailing(entries, trailing, counts[STEPPED])
    pending = sum(1 for entry in entries if entry[0] == PENDING)
    if pending and (counts[STEPPED] or counts[BY_EPOCH]):
        skipped += pending
        entries = [entry for entry in entries if entry[0] != PENDING]
    elif pending:  # lines of two or more pairs with no counter: records by their index
        resolved = []
        pairs = {i: read_line(entry[3]) for i, entry in enumerate(entries) if entry[0] == PENDING}
        single = _one_metric_key(pairs.values())
        for i, (entry_kind, counter, rank, line) in enumerate(entries):
            if entry_kind == PENDING:
                record = pairs[i]
                if len(record) < 2 and not (single is not None and list(record) == [single]):
                    skipped += 1
                    continue
                entry_kind, line = INDEXLESS, record
                counts[INDEXLESS] += 1
            resolved.append((entry_kind, counter, rank, line))
        entries = resolved
    kind = next((k for k in (STEPPED, BY_EPOCH, INDEXLESS) if counts[k]), STEPPED)
    if 0 < counts[STEPPED] < counts[BY_EPOCH] and sum(
            1 for entry in entries if entry[0] == BY_EPOCH and any(canonical_of(k) for k in entry[3])) > counts[STEPPED]:
        # records by epoch are read only until the first counted record: more of them, of metrics the
        # vocabulary knows, than counted records after it is a log by epoch ending in a few counted
        # lines (a Keras epoch cut short mid-way, its batch bar printed), not a log by steps
        kind = BY_EPOCH
    skipped += sum(counts) - counts[kind]
    if kind == STEPPED:
        entries = _steps_across_epochs(entries)
    table = LogTable()
    carried = src.carry or {}
    last, event_step = _replay(table, entries, kind, carried.get("last", 0), carried.get("event_step"))
    return ParsedLog(src.path, "text", guess_framework(table.metric_names), src.sha256, table.columns(),
                     skipped, kind == INDEXLESS, carry={"last": last, "event_step": event_step})


def _steps_across_epochs(entries: list) -> list:
    """A step counter that restarts with each epoch its line names (``Epoch 2, Step 0, Loss: ...``)
    runs on across the epochs (``table.counts_within_epochs``): a repeated inner counter is no
    restart (LABELS.md "Data before signals")."""
    stepped = [(counter, record.get("epoch")) for entry_kind, counter, _, record in entries if entry_kind == STEPPED]
    if not counts_within_epochs(stepped):
        return entries
    across = EpochSteps()
    return [(entry_kind, across(counter, record.get("epoch")), rank, record) if entry_kind == STEPPED
            else (entry_kind, counter, rank, record) for entry_kind, counter, rank, record in entries]


def _replay(table: LogTable, entries: list, kind: int, last: int = 0, event_step: int | None = None):
    """Records of ``kind`` at their counter (or index), in file order; each overflow event at the
    step being attempted: one after the step its line's bar shows or the last step logged before
    it, or one after the event before it when that is later (each event is one skipped update).
    ``last`` and ``event_step``: where the bytes before these left off; returns them at the end."""
    index = -1
    for entry_kind, counter, rank, record in entries:
        if entry_kind == CRASH:  # the run stopped on it: the last step logged is the one under way
            table.add_dict(counter if counter is not None else last, record, rank=rank)
        elif entry_kind == EVENT:
            before = counter if counter is not None else last
            event_step = before + 1 if event_step is None or before >= event_step else event_step + 1
            table.add_dict(event_step, record, rank=rank)
        elif entry_kind == kind:
            index += 1
            last = index if kind == INDEXLESS else counter
            table.add_dict(last, record, rank=rank)
    return last, event_step


LOOK_PAST_RECORDS = 8


def sniff_text(src: SourceFile) -> float:
    lines = [l for l in src.head_lines() if l.strip()]
    # the first HEAD_BYTES of a line hold its step counter and first pairs: a record wider than
    # that (thousands of per-expert values) is judged by them, at the cost of a head, not of the line
    stripped: dict[int, str] = {}  # each line stripped, and its pairs, once for every test below
    pairs: dict[int, dict[str, float]] = {}

    def line_at(i: int) -> str:
        if i not in stripped:
            stripped[i] = _strip(lines[i][:HEAD_BYTES])
        return stripped[i]

    def pairs_of(i: int) -> dict[str, float]:
        if i not in pairs:
            pairs[i] = extract_pairs(line_at(i))
        return pairs[i]

    with_step = 0
    header = epoch_alone = False
    for i in range(len(lines)):
        line = line_at(i)
        if STEP_HEADER.match(line):
            header = True
            continue
        after_epoch, epoch_alone = epoch_alone, bool(EPOCH_HEADER.match(line))
        if epoch_alone:
            continue
        hit = find_step(line)
        bar = KERAS_BAR.match(line)
        if FRACTION_BARE_VALUE.match(line):
            with_step += 1  # a progress fraction and the loop's one bare value
        elif bar and extract_pairs(line[bar.end():]):
            with_step += 1  # Keras' progress bar, within the epoch or closing it
        elif after_epoch and len(pairs_of(i)) >= 2:
            with_step += 1  # Keras: ``Epoch 3/15``, then the epoch's metrics on the progress line
        elif hit is not None and extract_pairs(hit[1]):
            with_step += 1
        elif hit is None and header and (pairs_of(i) or bare_pair(line)):
            with_step += 1
        elif hit is None and (epoch := find_epoch(line)) and extract_pairs(epoch[1]):
            with_step += 1
        if with_step >= LOOK_PAST_RECORDS:  # the answer cannot change: the other lines need no reading
            break
    if with_step < LOOK_PAST_RECORDS and sum(1 for raw in lines if overflow_record(raw)) >= LOOK_PAST_RECORDS:
        return 0.3  # a storm of skipped-update lines (a scaler's or a script's own): events are records
    if with_step >= LOOK_PAST_RECORDS:
        return 0.4  # many counted records: a pasted table or key=value config before them is preamble
    if with_step:
        return 0.3
    if _mostly_pairs((pairs_of(i) for i in range(len(lines))), len(lines)):
        return 0.2
    # one metric a line, no counter: the least likely reading, taken only where no other fits
    return 0.1 if _one_metric_key(pairs_of(i) for i in range(len(lines))) is not None else 0.0


def _one_metric_key(records) -> str | None:
    """The key of a log that prints one metric per line with no counter (``Mean Reward: 70.3``, a
    line per summary): where no line holds two pairs, the one key that at least
    ``LOOK_PAST_RECORDS`` one-pair lines share and that the log's other one-pair lines do not
    outnumber; None otherwise (a config dump names a key per line)."""
    keys: dict[str, int] = {}
    for record in records:
        if len(record) >= 2:
            return None
        if len(record) == 1:
            key = next(iter(record))
            keys[key] = keys.get(key, 0) + 1
    if not keys:
        return None
    key, count = max(keys.items(), key=lambda kv: kv[1])
    return key if count >= LOOK_PAST_RECORDS and 2 * count >= sum(keys.values()) else None


def _mostly_pairs(records: Iterable[dict], n: int) -> bool:
    """At least half the ``n`` lines' records (and two) hold two or more pairs; stops reading once
    that cannot hold (a preamble window of tracebacks is answered in a few lines, not all of them)."""
    need = max(2, n // 2)
    allowed_misses = n - need
    hits = misses = 0
    for record in records:
        if len(record) >= 2:
            hits += 1
            if hits >= need:
                return True
        else:
            misses += 1
            if misses > allowed_misses:
                return False
    return False


register(LogFormat("text", "generic text log: a step counter plus key: value / key=value / key value pairs",
                   sniff_text, parse_text, top_score=0.4, priority=70))
