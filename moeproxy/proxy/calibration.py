"""The ``activations`` feature method: calibration tokens through the model, one layer at a time.

Calibration data is JSON Lines, one sequence per line: ``{"input_ids": [...]}`` or ``{"text": "..."}``
(tokenised with the checkpoint's own tokenizer). Sequences are right-padded into one batch, capped
at ``max_calibration_tokens`` real tokens, and run once through ``StreamedModel`` on the chosen
device. At every MoE block the hooks record, per expert: how many tokens the router sent to it
(frequency), its gate-weighted output on those tokens (REAP-style saliency = mean g * |f(x)|), and
its output on all calibration tokens (HC-SMoE-style mean output). The signature is the L2-normalised
mean output joined with the L2-normalised mean gate-weighted routed output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moeproxy.errors import InputError, NotFound
from moeproxy.json_lines import read_json_lines
from moeproxy.proxy.masking import moe_block, router_module


def read_calibration(path: str | Path, ckpt_dir: Path, max_tokens: int, max_len: int) -> list[list[int]]:
    path = Path(path)
    if not path.exists():
        raise NotFound(f"{path}: calibration file not found")
    tokenizer = None
    seqs, total = [], 0
    for lineno, row in read_json_lines(path):
        if isinstance(row, dict) and isinstance(row.get("input_ids"), list):
            ids = [int(t) for t in row["input_ids"]]
        elif isinstance(row, dict) and isinstance(row.get("text"), str):
            if tokenizer is None:
                try:
                    from transformers import AutoTokenizer

                    tokenizer = AutoTokenizer.from_pretrained(str(ckpt_dir))
                except Exception as exc:
                    raise InputError(f"{path}:{lineno}: has text but {ckpt_dir} has no usable tokenizer "
                                     f"({type(exc).__name__}); give input_ids instead") from exc
            ids = tokenizer(row["text"])["input_ids"]
        else:
            raise InputError(f'{path}:{lineno}: each line must be {{"input_ids": [...]}} or {{"text": "..."}}')
        ids = ids[: min(max_len, max_tokens - total)]
        if ids:
            seqs.append(ids)
            total += len(ids)
        if total >= max_tokens:
            break
    if not seqs:
        raise InputError(f"{path}: no calibration tokens")
    return seqs


def calibrate(ctx):
    import torch

    from moeproxy.proxy.feature_types import LayerFeatures
    from moeproxy.proxy.streamed import StreamedModel

    if not ctx.calibration:
        raise InputError("--method activations needs --calibration FILE.jsonl")
    cfg = ctx.ckpt.config
    max_len = int(cfg.get("max_position_embeddings") or 2048)
    seqs = read_calibration(ctx.calibration, ctx.ckpt.path, ctx.max_calibration_tokens, max_len)
    vocab = int(cfg.get("vocab_size") or 0)
    bad = [t for s in seqs for t in s if not 0 <= t < vocab]
    if bad:
        raise InputError(f"{ctx.calibration}: token id {bad[0]} outside the vocabulary (size {vocab})")
    width = max(len(s) for s in seqs)
    pad = int(cfg.get("pad_token_id") or 0)
    input_ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        input_ids[i, : len(s)] = torch.tensor(s)
        attention[i, : len(s)] = 1
    valid = attention.flatten().bool()
    by_layer = {layer.layer: layer for layer in ctx.layout.layers}
    stats: dict[int, LayerFeatures] = {}

    def attach(index, layer):
        block = moe_block(layer)
        if block is None or index not in by_layer:
            return
        captured = {}

        def router_hook(module, args, output):
            captured["weights"], captured["index"] = output[1], output[2]

        def block_hook(module, args, output):
            x = args[0].reshape(-1, args[0].shape[-1])[valid.to(args[0].device)]
            weights = captured["weights"].reshape(-1, captured["weights"].shape[-1])[valid.to(x.device)]
            index = captured["index"].reshape(-1, captured["index"].shape[-1])[valid.to(x.device)]
            e = by_layer[index_layer].num_experts
            freq = torch.bincount(index.flatten(), minlength=e).cpu().numpy()
            mean_out, routed_out, saliency = [], [], np.zeros(e)
            ones = torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
            for j in range(e):
                y = module.experts(x, torch.full((x.shape[0], 1), j, device=x.device), ones).float()
                mean_out.append(y.mean(0))
                hit = (index == j)
                rows = hit.any(-1)
                if rows.any():
                    g = (weights.float() * hit).sum(-1)[rows]
                    gy = y[rows] * g[:, None]
                    routed_out.append(gy.mean(0))
                    saliency[j] = float((g * y[rows].norm(dim=-1)).mean())
                else:
                    routed_out.append(torch.zeros_like(y[0]))
            mo = torch.stack(mean_out)
            ro = torch.stack(routed_out)
            norm = lambda t: t / t.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # noqa: E731
            feats = torch.cat([norm(mo), norm(ro)], dim=1).cpu().numpy()
            stats[index_layer] = LayerFeatures(feats, frequency=freq, saliency=saliency,
                                               kind="mean output + gate-weighted routed output")

        index_layer = index
        router_module(block).register_forward_hook(router_hook)
        block.register_forward_hook(block_hook)

    model = StreamedModel(ctx.ckpt, ctx.adapter, device=ctx.device, on_layer_loaded=attach)
    with model:
        model.hidden_states(input_ids, attention)
    for layer in ctx.layout.layers:
        if layer.layer not in stats:
            raise InputError(f"calibration never reached MoE block {layer.block}")
        yield layer, stats[layer.layer]
