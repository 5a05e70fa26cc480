"""Basic task capability of a proxy before any RL: quality, memory and speed beside the full model.

``evaluate_pair(full_dir, proxy_dir, tasks_path, limits)`` loads each checkpoint in turn and, on the
identical task file, measures greedy exact match on the task prompts, perplexity of the held-out
answers given their prompts (answer tokens and ``<eos>``: the operands themselves are uniformly
random, so their perplexity says nothing about the model), peak memory (the process's resident high-water
mark above its level before loading, reset through ``/proc/self/clear_refs`` on Linux; None where
that is unavailable), each model in its own fresh process after torch and transformers are
imported, and tokens/s. ``EvalLimits`` are fixed before the run; the decision is
``keep`` when the exact-match drop and the perplexity ratio are within them, else ``reject``.

Task file: JSONL, one ``{"prompt": "37+58=", "answer": "95"}`` per line (``write_eval_tasks`` writes
the arithmetic eval split, which pre-training and RL never see).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from moeproxy.errors import InputError
from moeproxy.json_lines import read_json_lines
from moeproxy.repro.memory import reset_peak_rss, rss_kib


@dataclass(frozen=True)
class EvalLimits:
    max_quality_drop: float = 0.10  # absolute exact-match drop allowed (full - proxy)
    max_perplexity_ratio: float = 1.5  # proxy / full perplexity allowed

    def __post_init__(self):
        if not 0 <= self.max_quality_drop <= 1:
            raise InputError(f"--max-quality-drop must be in [0, 1], got {self.max_quality_drop}")
        if self.max_perplexity_ratio < 1:
            raise InputError(f"--max-perplexity-ratio must be >= 1, got {self.max_perplexity_ratio}")


def write_eval_tasks(path: str | Path) -> int:
    from moeproxy.repro import arithmetic

    rows = [{"prompt": arithmetic.prompt(a, b), "answer": arithmetic.answer(a, b)} for a, b in arithmetic.pairs("eval")]
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def read_tasks(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such task file")
    tasks = []
    for number, row in read_json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not isinstance(row.get("answer"), str):
            raise InputError(f'{path}:{number}: expected {{"prompt": str, "answer": str}}, got {json.dumps(row)[:80]!r}')
        tasks.append(row)
    if not tasks:
        raise InputError(f"{path}: no tasks")
    return tasks


def measure_model(path: str | Path, tasks: list[dict], batch_size: int = 256) -> dict:
    """Exact match, perplexity, peak memory and tokens/s of one checkpoint on ``tasks``."""
    import torch

    from moeproxy.repro.sampling import decode_completions, encode_prompts, encode_supervised, position_ids_for, sample
    from moeproxy.repro.tiny_moe import load_tiny_moe

    can_reset = reset_peak_rss()
    before = rss_kib("VmRSS")
    model, tokenizer = load_tiny_moe(path)
    model.eval()
    correct, nll, counted, tokens = 0, 0.0, 0, 0
    started = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(tasks), batch_size):
            chunk = tasks[i : i + batch_size]
            prompts = [t["prompt"] for t in chunk]
            answers = [t["answer"] for t in chunk]
            ids, mask = encode_prompts(tokenizer, prompts)
            rollout = sample(model, tokenizer, ids, mask, temperature=0.0)
            texts = decode_completions(tokenizer, rollout)
            correct += sum(text.strip() == answer for text, answer in zip(texts, answers))
            tokens += int(mask.sum()) * rollout.completion_ids.shape[1] + int(rollout.completion_mask.sum())
            # perplexity of the held-out answers (answer tokens + <eos>) given their prompts
            full_ids, full_mask, labels = encode_supervised(tokenizer, prompts, answers)
            out = model(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids_for(full_mask), use_cache=False)
            logits = out.logits[:, :-1].float()
            target = labels[:, 1:]
            valid = target != -100
            logp = torch.log_softmax(logits, -1).gather(2, target.clamp(min=0)[:, :, None]).squeeze(2)
            nll -= float((logp * valid).sum())
            counted += int(valid.sum())
            tokens += int(full_mask.sum())
    seconds = time.perf_counter() - started
    peak = rss_kib("VmHWM")
    return {
        "path": str(path),
        "exact_match": correct / len(tasks),
        "perplexity": math.exp(nll / max(counted, 1)),
        "parameters": sum(p.numel() for p in model.parameters()),
        "peak_memory_bytes": (peak - before) * 1024 if (can_reset and peak is not None and before is not None) else None,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "seconds": round(seconds, 3),
    }


def _child(path, tasks, queue) -> None:
    import torch
    import transformers  # noqa: F401  (imported before the memory baseline)

    torch.set_num_threads(1)
    try:
        queue.put(measure_model(path, tasks))
    except Exception as exc:  # reported by the parent as one line
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def measure_in_subprocess(path, tasks: list[dict]) -> dict:
    """``measure_model`` in a fresh process, so neither model's memory hides the other's."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(str(path), tasks, queue))
    proc.start()
    import queue as queue_module

    while True:
        try:
            result = queue.get(timeout=5)
            break
        except queue_module.Empty:
            if not proc.is_alive():
                raise InputError(f"{path}: evaluation process exited with status {proc.exitcode} before reporting")
    proc.join()
    if "error" in result:
        raise InputError(f"{path}: evaluation failed: {result['error']}")
    return result


def evaluate_pair(full_dir, proxy_dir, tasks_path, limits: EvalLimits | None = None) -> dict:
    limits = limits or EvalLimits()
    tasks = read_tasks(tasks_path)
    proxy = measure_in_subprocess(proxy_dir, tasks)
    full = measure_in_subprocess(full_dir, tasks)
    drop = full["exact_match"] - proxy["exact_match"]
    ppl_ratio = proxy["perplexity"] / full["perplexity"]
    keep = drop <= limits.max_quality_drop and ppl_ratio <= limits.max_perplexity_ratio
    reasons = []
    if drop > limits.max_quality_drop:
        reasons.append(f"exact-match drop {drop:.3f} > {limits.max_quality_drop}")
    if ppl_ratio > limits.max_perplexity_ratio:
        reasons.append(f"perplexity ratio {ppl_ratio:.3f} > {limits.max_perplexity_ratio}")
    return {
        "decision": "keep" if keep else "reject",
        "reasons": reasons,
        "limits": asdict(limits),
        "tasks": {"path": str(tasks_path), "count": len(tasks)},
        "full": full,
        "proxy": proxy,
        "quality_drop": round(drop, 4),
        "perplexity_ratio": round(ppl_ratio, 4),
    }


def format_evaluation(result: dict) -> str:
    f, p = result["full"], result["proxy"]

    from moeproxy.units import human_bytes as mem

    lines = [
        f"{'':7}{'exact match':>12}{'perplexity':>12}{'parameters':>12}{'peak memory':>14}{'tokens/s':>10}",
        f"{'full':7}{f['exact_match']:>12.3f}{f['perplexity']:>12.3f}{f['parameters']:>12,}{mem(f['peak_memory_bytes']):>14}{f['tokens_per_s']:>10.0f}",
        f"{'proxy':7}{p['exact_match']:>12.3f}{p['perplexity']:>12.3f}{p['parameters']:>12,}{mem(p['peak_memory_bytes']):>14}{p['tokens_per_s']:>10.0f}",
        f"limits: exact-match drop <= {result['limits']['max_quality_drop']}, perplexity ratio <= "
        f"{result['limits']['max_perplexity_ratio']} ({result['tasks']['count']} tasks)",
        f"{result['decision'].upper()}: drop {result['quality_drop']:+.3f}, perplexity ratio {result['perplexity_ratio']:.3f}"
        + (f" ({'; '.join(result['reasons'])})" if result["reasons"] else ""),
    ]
    return "\n".join(lines)
