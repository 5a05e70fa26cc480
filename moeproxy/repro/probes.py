"""Routing probes: per-layer routing entropy and expert load from forward hooks on router modules.

``RoutingProbe(model)`` finds the router module of every MoE layer (by the family's router class),
hooks it, and accumulates, over every forward pass until ``collect()``:

- ``routing_entropy/layer_<i>``: mean over tokens of the entropy of the router's score distribution,
  divided by ``log E`` (so 1 = uniform, 0 = one expert takes everything). Scores use the family's own
  function: softmax of the logits, or for sigmoid routers (DeepSeek-V3, GLM-4.5, dots1, MiniMax-M2)
  ``sigmoid(logits) + e_score_correction_bias`` clamped at 0 and normalised to sum 1.
- ``expert load``: the share of top-k assignments each expert received (chosen on the same scores,
  ignoring group limits), and ``load_imbalance/layer_<i>`` = max / mean load.
- ``routing_entropy`` and ``load_imbalance``: means over MoE layers.

Family facts (router module, scoring kind, correction bias) come from the proxy family registry
``moeproxy.proxy.arch``, so a family added there is probed here too.

Padding is excluded when the caller passes ``token_mask`` (the attention mask) to ``set_token_mask``
before the forward. ``RoutingProbeCallback`` wraps the probe as a Hugging Face ``TrainerCallback``:
``trainer.add_callback(RoutingProbeCallback())`` (or ``attach_routing_probe(trainer)`` to run before
the reporting callbacks) adds the metrics to every logged step.
"""

from __future__ import annotations

from moeproxy.vocabulary import LAYER_PREFIX

import math
import re
from dataclasses import dataclass

import torch

@dataclass(frozen=True)
class RouterFamily:
    """What the probe needs about a family, derived from its ``moeproxy.proxy.arch`` adapter."""

    model_type: str
    router_module_regex: re.Pattern  # in-memory module name of each MoE layer's router
    scoring: str  # "softmax" | "sigmoid"
    bias_attr: str | None = None  # correction bias attribute on the router module


def router_family(model) -> RouterFamily:
    """Resolve the family of ``model`` through the proxy family registry (one source of facts)."""
    from moeproxy.proxy.arch import SIGMOID_GROUPED, adapter_for

    config = model.config.to_dict()
    adapter = adapter_for(config, source=f"{type(model).__name__}.config")
    block = adapter.block_regex
    if adapter.memory_block_rename is not None:
        on_disk, in_memory = (part.strip(".") for part in adapter.memory_block_rename)
        block = block.replace(on_disk, in_memory)
    router_module = adapter.router_tensors[0][0].rsplit(".", 1)[0]
    bias_attr = None
    for suffix, _dim in adapter.router_tensors[1:]:
        owner, _, attr = suffix.rpartition(".")
        if owner == router_module and "correction_bias" in attr:
            bias_attr = attr
    scoring = "sigmoid" if adapter.routing == SIGMOID_GROUPED else "softmax"
    pattern = re.compile(rf"^(?:{block})\.{re.escape(router_module)}$")
    return RouterFamily(adapter.model_type, pattern, scoring, bias_attr)


def find_routers(model) -> list[tuple[int, str, torch.nn.Module]]:
    """``[(layer_index, module_name, router_module)]`` for every MoE layer, in layer order."""
    family = router_family(model)
    found = []
    for name, module in model.named_modules():
        match = family.router_module_regex.match(name)
        if match is not None:
            found.append((int(match.group("layer")), name, module))
    found.sort(key=lambda item: item[0])
    return found


def routing_scores(logits: torch.Tensor, family: RouterFamily, bias: torch.Tensor | None) -> torch.Tensor:
    """Per-token score distribution ``[T, E]`` (rows sum to 1) under the family's scoring function."""
    logits = logits.float()
    if family.scoring == "softmax":
        return torch.softmax(logits, dim=-1)
    scores = torch.sigmoid(logits)
    if bias is not None:
        scores = scores + bias.float().reshape(1, -1)
    scores = scores.clamp(min=0)
    return scores / scores.sum(-1, keepdim=True).clamp(min=1e-12)


@dataclass
class _LayerTotals:
    entropy_sum: float = 0.0
    tokens: int = 0
    load: torch.Tensor | None = None


class RoutingProbe:
    """Hooks every router of ``model``; ``collect()`` returns and resets the accumulated statistics."""

    def __init__(self, model, top_k: int | None = None):
        self.family = router_family(model)
        self.routers = find_routers(model)
        if not self.routers:
            from moeproxy.errors import InputError

            raise InputError(f"routing probes: no router modules found in {type(model).__name__}")
        self.top_k = top_k or int(getattr(model.config, "num_experts_per_tok", 1))
        self.enabled = True
        self._mask: torch.Tensor | None = None
        self._totals: dict[int, _LayerTotals] = {}
        self._handles = [
            router.register_forward_hook(self._make_hook(layer, router)) for layer, _name, router in self.routers
        ]

    @property
    def layers(self) -> list[int]:
        return [layer for layer, *_ in self.routers]

    def set_token_mask(self, attention_mask: torch.Tensor | None) -> None:
        """Tokens to count in the next forward passes (flattened like the router input); None = all."""
        self._mask = None if attention_mask is None else attention_mask.reshape(-1).bool()

    def _make_hook(self, layer: int, router):
        def hook(_module, _inputs, output):
            if not self.enabled:
                return
            logits = output[0] if isinstance(output, tuple) else output
            bias = getattr(router, self.family.bias_attr, None) if self.family.bias_attr else None
            with torch.no_grad():
                logits = logits.detach().reshape(-1, logits.shape[-1])
                if self._mask is not None and self._mask.numel() == logits.shape[0]:
                    logits = logits[self._mask]
                self._accumulate(layer, routing_scores(logits, self.family, bias))

        return hook

    def _accumulate(self, layer: int, scores: torch.Tensor) -> None:
        num_experts = scores.shape[-1]
        totals = self._totals.setdefault(layer, _LayerTotals(load=torch.zeros(num_experts)))
        if scores.shape[0] == 0:
            return
        finite = torch.isfinite(scores).all(-1)
        p = scores.clamp(min=1e-12)
        entropy = -(scores * p.log()).sum(-1) / math.log(num_experts)
        entropy = torch.where(finite, entropy, torch.full_like(entropy, float("nan")))
        totals.entropy_sum += float(entropy.sum())
        totals.tokens += int(scores.shape[0])
        chosen = torch.nan_to_num(scores, nan=0.0).topk(min(self.top_k, num_experts), dim=-1).indices
        totals.load += torch.bincount(chosen.reshape(-1), minlength=num_experts).float()

    def collect(self) -> dict:
        """``{"metrics": {name: value}, "load": {layer: [share per expert]}}`` since the last collect."""
        metrics: dict[str, float] = {}
        load: dict[int, list[float]] = {}
        entropies, imbalances = [], []
        for layer in self.layers:
            totals = self._totals.get(layer)
            if totals is None or totals.tokens == 0:
                continue
            entropy = totals.entropy_sum / totals.tokens
            share = totals.load / totals.load.sum().clamp(min=1)
            imbalance = float(share.max() / share.mean()) if float(share.sum()) > 0 else float("nan")
            metrics[f"{LAYER_PREFIX}{layer}"] = entropy
            metrics[f"load_imbalance/layer_{layer}"] = imbalance
            load[layer] = [round(float(x), 6) for x in share]
            entropies.append(entropy)
            imbalances.append(imbalance)
        if entropies:
            metrics["routing_entropy"] = sum(entropies) / len(entropies)
            metrics["load_imbalance"] = sum(imbalances) / len(imbalances)
        self._totals = {}
        return {"metrics": metrics, "load": load}

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _trainer_callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


class RoutingProbeCallback(_trainer_callback_base()):
    """HF ``TrainerCallback``: routing entropy and load imbalance in every logged step.

    The probe attaches at ``on_train_begin`` to the trainer's model and collects at ``on_log``; the
    values are added to the ``logs`` dict and to the step's ``state.log_history`` entry (so they reach
    ``trainer_state.json``). Place it before reporting callbacks with ``attach_routing_probe``.
    """

    def __init__(self, per_layer: bool = True):
        self.per_layer = per_layer
        self.probe: RoutingProbe | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None and self.probe is None:
            self.probe = RoutingProbe(model)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.probe is None or logs is None or "loss" not in logs and "grad_norm" not in logs:
            return
        metrics = self.probe.collect()["metrics"]
        if not self.per_layer:
            metrics = {k: v for k, v in metrics.items() if "/layer_" not in k}
        logs.update(metrics)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)

    def on_train_end(self, args, state, control, **kwargs):
        if self.probe is not None:
            self.probe.remove()
            self.probe = None


def attach_routing_probe(trainer, per_layer: bool = True) -> RoutingProbeCallback:
    """Add a ``RoutingProbeCallback`` ahead of the trainer's reporting callbacks; returns it."""
    callback = RoutingProbeCallback(per_layer=per_layer)
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
