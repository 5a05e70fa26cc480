"""The verifiable task: two-number addition ``"37+58="`` -> ``"95"``, reward 1 for the exact answer.

Every ordered pair (a, b) with 0 <= a, b < 100 belongs to exactly one split, chosen by a fixed hash so
that evaluation prompts never appear in pre-training or RL data: ``eval`` (about 10%, used by
``moeproxy evaluate`` and for held-out perplexity) and ``train`` (pre-training and RL prompts).
"""

from __future__ import annotations

import random

MAX_OPERAND = 100
SPLITS = ("train", "eval")


def split_of(a: int, b: int) -> str:
    """The split a pair belongs to (fixed forever: changing it would leak eval prompts)."""
    return "eval" if (a * 37 + b * 11) % 10 == 3 else "train"


def pairs(split: str) -> list[tuple[int, int]]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return [(a, b) for a in range(MAX_OPERAND) for b in range(MAX_OPERAND) if split_of(a, b) == split]


def prompt(a: int, b: int) -> str:
    return f"{a}+{b}="


def answer(a: int, b: int) -> str:
    return str(a + b)


def reward(prompt_text: str, completion: str) -> float:
    """1.0 when the completion (special tokens removed, whitespace stripped) is the exact sum."""
    left, _, _ = prompt_text.partition("=")
    a_text, _, b_text = left.partition("+")
    try:
        expected = int(a_text) + int(b_text)
    except ValueError:
        return 0.0
    return 1.0 if completion.strip() == str(expected) else 0.0


def sample_prompts(split: str, n: int, rng: random.Random) -> list[tuple[int, int]]:
    population = pairs(split)
    return [population[rng.randrange(len(population))] for _ in range(n)]
