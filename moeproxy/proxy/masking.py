"""Mask experts in a loaded MoE block so the full model routes only among the kept ones.

This is the reference a proxy is checked against: pruning the removed experts must give the same
outputs as masking them here. Bias routers are masked through their parameters (GPT-OSS
``router.bias`` and DeepSeek-V3 ``e_score_correction_bias`` set to -inf for removed experts);
softmax routers get a forward hook that sets the removed logits to -inf and redoes
softmax -> top-k -> optional renormalisation, exactly as the transformers routers do.
"""

from __future__ import annotations

from moeproxy.proxy.arch import BIASED_LINEAR_TOPK, SIGMOID_GROUPED, SOFTMAX_TOPK, FamilyAdapter


def moe_block(layer):
    """The layer's MoE block (``layer.mlp`` with ``experts``), or None for a dense layer."""
    block = getattr(layer, "mlp", None)
    return block if block is not None and hasattr(block, "experts") else None


def router_module(block):
    return getattr(block, "gate", None) or getattr(block, "router")


def _softmax_hook(removed):
    import torch

    def hook(module, args, output):
        logits, weights, _ = output
        mask = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
        mask[removed] = True
        probs = torch.softmax(logits.float().masked_fill(mask, float("-inf")), dim=-1)
        top_v, top_i = torch.topk(probs, module.top_k, dim=-1)
        if getattr(module, "norm_topk_prob", True):
            top_v = top_v / top_v.sum(dim=-1, keepdim=True)
        return logits, top_v.to(weights.dtype), top_i

    return hook


def mask_experts(adapter: FamilyAdapter, layer, removed: list[int]):
    """Mask ``removed`` expert ids in ``layer`` (after its weights are loaded); returns a hook handle or None."""
    import torch

    block = moe_block(layer)
    if block is None or not removed:
        return None
    router = router_module(block)
    with torch.no_grad():
        if adapter.routing == SIGMOID_GROUPED:
            router.e_score_correction_bias[removed] = float("-inf")
            return None
        if adapter.routing == BIASED_LINEAR_TOPK:
            router.bias[removed] = float("-inf")
            return None
    if adapter.routing == SOFTMAX_TOPK:
        return router.register_forward_hook(_softmax_hook(list(removed)))
    raise NotImplementedError(f"no masking rule for routing kind {adapter.routing!r}")
