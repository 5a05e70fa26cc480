"""Supervised warm-up of the tiny MoE on the arithmetic train split, to partial competence.

``pretrain(PretrainConfig(...), out_dir)`` trains from a fixed seed on CPU, logs the answer loss,
saves a normal Hugging Face checkpoint (``config.json``, ``model.safetensors``, tokenizer files) and
``pretrain_report.json`` with the held-out exact match. Eval pairs are never seen here.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from moeproxy.repro.tiny_moe import TinyMoeShape


@dataclass
class PretrainConfig:
    seed: int = 0
    steps: int = 1500
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 50
    shape: TinyMoeShape = field(default_factory=TinyMoeShape)
    log_every: int = 100
    dense_intermediate_size: int | None = None  # set: a dense Qwen3 baseline instead of the MoE

    def __post_init__(self):
        if isinstance(self.shape, dict):
            self.shape = TinyMoeShape(**self.shape)
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("steps, batch_size and lr must be positive")


def exact_match(model, tokenizer, pairs: list[tuple[int, int]], batch_size: int = 512) -> float:
    """Greedy exact-match accuracy on ``pairs``."""
    import torch

    from moeproxy.repro import arithmetic
    from moeproxy.repro.sampling import decode_completions, encode_prompts, sample

    correct = 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(pairs), batch_size):
            chunk = pairs[i : i + batch_size]
            prompts = [arithmetic.prompt(a, b) for a, b in chunk]
            ids, mask = encode_prompts(tokenizer, prompts)
            texts = decode_completions(tokenizer, sample(model, tokenizer, ids, mask, temperature=0.0))
            correct += sum(arithmetic.reward(p, t) for p, t in zip(prompts, texts))
    return correct / max(len(pairs), 1)


def _supervised_step(model, tokenizer, opt, rng: random.Random, batch_size: int, is_moe: bool):
    """One AdamW step of answer-only supervised loss on a train-split batch (gradients clipped to 1);
    returns the model output (its loss, and for a MoE its aux loss)."""
    import torch

    from moeproxy.repro import arithmetic
    from moeproxy.repro.sampling import encode_supervised, position_ids_for

    batch = arithmetic.sample_prompts("train", batch_size, rng)
    ids, mask, labels = encode_supervised(
        tokenizer, [arithmetic.prompt(a, b) for a, b in batch], [arithmetic.answer(a, b) for a, b in batch]
    )
    extra = {"output_router_logits": True} if is_moe else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_for(mask), labels=labels,
                use_cache=False, **extra)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return out


def supervised_steps(model, tokenizer, steps: int, seed: int, lr: float, batch_size: int = 128) -> float:
    """``steps`` AdamW steps of answer-only supervised loss on the train split; returns the last loss."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    is_moe = getattr(model.config, "num_experts", None) is not None
    model.train()
    loss = float("nan")
    for _ in range(steps):
        loss = float(_supervised_step(model, tokenizer, opt, rng, batch_size, is_moe).loss.detach())
    return loss


def heal(src_dir: str | Path, out_dir: str | Path, steps: int, seed: int = 0, lr: float = 1e-3, log=print) -> dict:
    """Short supervised fine-tune of a checkpoint (a freshly pruned proxy) on the train split.

    Pruning removes experts the backbone relied on; a hundred steps of the pre-training data
    restore most of the task skill before RL (the idea of healing after pruning). Writes a normal
    checkpoint (config, weights, tokenizer, the source's proxy_report.json) to ``out_dir``.
    """
    import shutil

    from moeproxy.repro.tiny_moe import load_tiny_moe

    model, tokenizer = load_tiny_moe(src_dir)
    started = time.perf_counter()
    loss = supervised_steps(model, tokenizer, steps, seed, lr)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    if (Path(src_dir) / "proxy_report.json").is_file():
        shutil.copy2(Path(src_dir) / "proxy_report.json", out_dir / "proxy_report.json")
    report = {"source": str(src_dir), "steps": steps, "lr": lr, "seed": seed,
              "seconds": round(time.perf_counter() - started, 1), "final_loss": loss}
    (out_dir / "heal_report.json").write_text(json.dumps(report, indent=2) + "\n")
    log(f"healed {src_dir} -> {out_dir}: {steps} steps, final loss {loss:.4f}")
    return report


def pretrain(config: PretrainConfig, out_dir: str | Path, log=print) -> dict:
    import torch

    from moeproxy.repro import arithmetic
    from moeproxy.repro.tiny_moe import build_tiny_moe, build_tokenizer

    out_dir = Path(out_dir)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    tokenizer = build_tokenizer()
    if config.dense_intermediate_size:
        from moeproxy.repro.tiny_moe import build_tiny_dense

        model = build_tiny_dense(config.seed, config.dense_intermediate_size, config.shape)
    else:
        model = build_tiny_moe(config.seed, config.shape)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / config.warmup_steps) * max(0.05, 1 - s / config.steps)
    )
    started = time.perf_counter()
    model.train()
    for step in range(1, config.steps + 1):
        out = _supervised_step(model, tokenizer, opt, rng, config.batch_size, not config.dense_intermediate_size)
        sched.step()
        if step % config.log_every == 0 or step == config.steps:
            aux = getattr(out, "aux_loss", None)
            aux_text = f" aux_loss: {aux.item():.4f}" if aux is not None else ""
            log(f"step {step} loss: {out.loss.item():.4f}{aux_text} lr: {sched.get_last_lr()[0]:.2e}")
    seconds = time.perf_counter() - started
    eval_em = exact_match(model, tokenizer, arithmetic.pairs("eval"))
    train_em = exact_match(model, tokenizer, arithmetic.pairs("train")[::10])
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    report = {
        "config": asdict(config),
        "train_seconds": round(seconds, 1),
        "eval_exact_match": eval_em,
        "train_exact_match_sample": train_em,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    (out_dir / "pretrain_report.json").write_text(json.dumps(report, indent=2) + "\n")
    log(f"saved {out_dir}: eval exact match {eval_em:.3f}, train sample {train_em:.3f}, {seconds:.0f} s")
    return report
