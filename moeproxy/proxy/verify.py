"""Check a freshly written proxy: it instantiates, loads, and equals the masked full model.

Steps, each recorded in the report: (1) transformers builds the proxy's config and model on the
meta device; (2) every decoder layer of the proxy loads strictly into its transformers module;
(3) the proxy is compared with the full model whose removed experts are masked
(moeproxy.proxy.masking): layer by layer on identical inputs (the reference's recorded hidden
states, so bf16 rounding cannot pile up across layers and a rounding-level tolerance applies) and
end to end on the logits of a seeded few-token batch. The two models run one after the other, each
streamed one module at a time (moeproxy.proxy.streamed), so at most one decoder layer of the full
model is resident. Quantised checkpoints (FP8, MXFP4) skip step 3 on CPU and say so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from moeproxy.errors import InputError
from moeproxy.proxy.arch import FamilyAdapter
from moeproxy.proxy.checkpoint import Checkpoint
from moeproxy.proxy.masking import mask_experts, moe_block, router_module
from moeproxy.proxy.streamed import StreamedModel, checkpoint_quantisation
from moeproxy.proxy.threads import one_intra_op_thread

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


def _detached(value):
    """A copy of a layer call's arguments or output that later in-place ops cannot change."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _hidden(output):
    return output[0] if isinstance(output, (tuple, list)) else output


@dataclass
class LayerCall:
    """One decoder layer's call in the reference forward: its inputs and its output."""

    args: tuple
    kwargs: dict
    output: object

    @property
    def hidden_in(self):
        return self.args[0] if self.args else self.kwargs["hidden_states"]


def _layer_call_recorder(calls: dict[int, LayerCall]):
    def record(index, args, kwargs, output):
        calls[index] = LayerCall(_detached(args), _detached(kwargs), _hidden(output).detach().clone())
    return record


def layer_tolerance(dtype, reference_out, reference_in) -> float:
    """Allowed max |proxy - reference| for one decoder layer run on the same inputs.

    The layer's output is its input plus its update; kept experts are computed by the same kernels
    on the same rows in the same order, so the two may differ only by rounding: the router's matrix
    product over all experts' rows versus the kept rows (another blocking) and the masked versus the
    pruned softmax can move a routing weight, and so the update, by an ulp of ``dtype``, and the
    rounded residual sum by an ulp of the output: ``eps * (4 max|update| + 2 max|output|)``.
    Float32: about 1e-6 relative; bfloat16: a few percent of the update. Measured on the bench
    checkpoint (bf16, 8 layers, 24 and 512 tokens): most layers differ by exactly 0, the worst by
    0.47 of this tolerance. A routing top-k near-tie broken differently by that rounding would
    exceed it; none was seen.
    """
    import torch

    eps = torch.finfo(dtype).eps
    update = (reference_out.float() - reference_in.float()).abs().max().item()
    return eps * (4 * update + 2 * reference_out.float().abs().max().item()) + torch.finfo(torch.float32).tiny


def verify_proxy(src: Checkpoint, out: Checkpoint, adapter: FamilyAdapter, kept: dict[int, list[int]],
                 top_k: int | None = None, device="cpu", seed: int = 0, tokens: int = VERIFY_TOKENS,
                 progress: Callable[[int, int, str], None] | None = None) -> dict:
    """``kept`` maps decoder layer index -> original expert ids kept. Returns the report's verify dict.

    ``progress(done, total, message)`` is called after every decoder layer of either pass
    (total = 2 x decoder layers).

    Two streamed passes, one model at a time, one decoder layer resident at a time:
    1. the full model with the removed experts masked (the reference) runs a seeded few-token batch;
       every decoder layer's inputs and output are recorded (a few kilobytes per layer);
    2. the proxy runs the same batch; right after each of its layers is loaded, that layer is also
       run on the reference's recorded inputs and must reproduce the reference's output within
       ``layer_tolerance``. Finally both models' logits are compared end to end.
    Passing needs both: every layer matches and the logits differ by at most
    ``(1e-4 if float32 else 2e-2) * max(1, max|logit|)``.
    """
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

    layers: list[dict] = []

    steps = 2 * int(src.config.get("num_hidden_layers") or len(kept))
    step = iter(range(1, steps + 1))
    report_progress = progress or (lambda *a: None)
    reference: dict[int, LayerCall] = {}
    record = _layer_call_recorder(reference)

    def record_layer(index, args, kwargs, output):
        record(index, args, kwargs, output)
        report_progress(next(step, steps), steps, f"full model layer {index} (masked)")

    def check_layer(index, layer):
        call = reference.get(index)
        if call is None:
            raise InputError(f"{out.path}: decoder layer {index} has no counterpart in the full model's forward")
        got = _hidden(layer.forward(*call.args, **call.kwargs))
        diff = (got.float() - call.output.float()).abs().max().item()
        tol = layer_tolerance(call.output.dtype, call.output, call.hidden_in)
        layers.append({"layer": index, "max_abs_diff": diff, "tolerance": tol, "passed": bool(diff <= tol)})
        report_progress(next(step, steps), steps, f"proxy layer {index}: max |diff| {diff:.2g} (tolerance {tol:.2g})")

    vocab = int(src.config.get("vocab_size", 2))
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (2, tokens), generator=gen)
    try:
        with one_intra_op_thread():
            with StreamedModel(src, adapter, device=device, dtype=None, on_layer_loaded=mask,
                               on_layer_output=record_layer) as full:
                full_logits = full.logits(input_ids).float().cpu()
            with StreamedModel(out, adapter, device=device, on_layer_loaded=check_layer) as proxy:
                exact = proxy.dtype == torch.float32
                decoder_layers = len(proxy.layers)
                proxy_logits = proxy.logits(input_ids).float().cpu()
        result["loads"] = True
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        return result
    finally:
        reference.clear()  # recorded activations are not needed past this point
    diff = (proxy_logits - full_logits).abs().max().item()
    scale = full_logits.abs().max().item()
    tol = (1e-4 if exact else 2e-2) * max(1.0, scale)
    failed = [entry["layer"] for entry in layers if not entry["passed"]]
    if failed:
        worst = max((e for e in layers if not e["passed"]), key=lambda e: e["max_abs_diff"] / e["tolerance"])
        result["error"] = (f"decoder layers {failed} differ from the masked full model on the same inputs "
                           f"(layer {worst['layer']}: max |diff| {worst['max_abs_diff']:.3g} > tolerance "
                           f"{worst['tolerance']:.3g})")
    elif len(layers) != decoder_layers:
        result["error"] = f"only {len(layers)} of {decoder_layers} decoder layers were compared"
    elif diff > tol:
        result["error"] = f"logits differ by {diff:.3g} > tolerance {tol:.3g}"
    result.update(forward_checked=True, max_abs_logit_diff=diff, tolerance=tol, tokens=int(input_ids.numel()),
                  layers=layers, layers_failed=failed,
                  max_layer_diff_over_tolerance=max((e["max_abs_diff"] / e["tolerance"] for e in layers), default=0.0),
                  passed=bool(diff <= tol and not failed and len(layers) == decoder_layers),
                  seconds=round(time.time() - started, 3))
    return result
