"""Check a freshly written proxy: it instantiates, loads, and equals the masked full model.

Steps, each recorded in the report: (1) transformers builds the proxy's config and model on the
meta device; (2) every decoder layer of the proxy loads strictly into its transformers module
(streamed, one layer at a time); (3) a few-token forward of the proxy is compared with the full
model whose removed experts are masked (moeproxy.proxy.masking), both streamed layer by layer, so
memory stays at about one layer. Quantised checkpoints (FP8, MXFP4) skip step 3 on CPU and say so.
"""

from __future__ import annotations

import time

from moeproxy.proxy.arch import FamilyAdapter
from moeproxy.proxy.checkpoint import Checkpoint
from moeproxy.proxy.masking import mask_experts, moe_block, router_module
from moeproxy.proxy.streamed import StreamedModel, checkpoint_quantisation

VERIFY_TOKENS = 12


def instantiate_on_meta(config: dict) -> None:
    """Raise if the installed transformers cannot build this config's model (no weights touched)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {k: v for k, v in config.items() if k not in ("quantization_config", "auto_map", "architectures")}
    model_type = cfg.pop("model_type")
    hf = AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        AutoModelForCausalLM.from_config(hf)


def verify_proxy(src: Checkpoint, out: Checkpoint, adapter: FamilyAdapter, kept: dict[int, list[int]],
                 top_k: int | None = None, device="cpu", seed: int = 0, tokens: int = VERIFY_TOKENS) -> dict:
    """``kept`` maps decoder layer index -> original expert ids kept. Returns the report's verify dict."""
    import torch

    started = time.time()
    result = {"instantiates": False, "loads": False, "forward_checked": False, "passed": False}
    try:
        instantiate_on_meta(out.config)
        result["instantiates"] = True
    except Exception as exc:
        result["error"] = f"proxy config does not instantiate: {exc}"
        return result
    quant = checkpoint_quantisation(src.config)
    if quant:
        result["forward_skipped"] = f"{quant}-quantised weights: forward comparison needs unquantised weights"
        result["passed"] = True
        result["loads"] = None
        result["seconds"] = round(time.time() - started, 3)
        return result
    num_experts = adapter.num_experts(src.config)
    removed = {i: sorted(set(range(num_experts)) - set(ids)) for i, ids in kept.items()}

    def mask(index, layer):
        if index in removed:
            mask_experts(adapter, layer, removed[index])
            if top_k is not None:  # --top-k scale: the reference routes to k' experts too
                router_module(moe_block(layer)).top_k = top_k

    vocab = int(src.config.get("vocab_size", 2))
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (2, tokens), generator=gen)
    try:
        proxy = StreamedModel(out, adapter, device=device)
        proxy_logits = proxy.logits(input_ids).float().cpu()
        exact = proxy.dtype == torch.float32
        result["loads"] = True
        del proxy
        full = StreamedModel(src, adapter, device=device, dtype=None, on_layer_loaded=mask)
        full_logits = full.logits(input_ids).float().cpu()
        del full
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        return result
    diff = (proxy_logits - full_logits).abs().max().item()
    scale = full_logits.abs().max().item()
    tol = (1e-4 if exact else 2e-2) * max(1.0, scale)
    result.update(forward_checked=True, max_abs_logit_diff=diff, tolerance=tol, tokens=int(input_ids.numel()),
                  passed=bool(diff <= tol), seconds=round(time.time() - started, 3))
    return result
