"""Per-family adapters: where each MoE family keeps its experts, router and expert-count fields.

An adapter describes one ``model_type`` as it is published on disk (safetensors keys), not as
transformers lays it out in memory. Everything the pruner, the planner and the verifier need to know
about a family lives here, so adding a family (GLM-4.5, Ernie-4.5, Llama4, ...) is one ``register``
call. ``adapter_for(config)`` resolves a config dict to its adapter or raises ``InputError`` listing
the supported families.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeproxy.errors import InputError
from moeproxy.proxy.constraints import RoutingShape
from moeproxy.registry import Registry

# routing kinds: how the router scores experts (used for masking and calibration statistics)
SOFTMAX_TOPK = "softmax_topk"  # softmax over all E, top-k, optional renormalisation
SIGMOID_GROUPED = "sigmoid_grouped"  # DeepSeek-V3: sigmoid + correction bias, group-limited top-k
BIASED_LINEAR_TOPK = "biased_linear_topk"  # GPT-OSS: linear with bias, top-k, softmax over the k


@dataclass(frozen=True)
class FamilyAdapter:
    """How one MoE family stores its experts and router on disk.

    ``block_regex`` matches the MoE block prefix of a key and captures the layer index
    (e.g. ``model.layers.7.mlp``). ``router_tensors`` are (suffix under the block, expert dim)
    pairs sliced to the kept experts. Per-expert layouts store ``{block}.experts.{M}.{name}``;
    fused layouts store ``{block}.experts.{name}`` with experts along dim 0.
    """

    model_type: str
    block_regex: str
    router_tensors: tuple[tuple[str, int], ...]
    count_keys: tuple[str, ...]  # config fields holding the routed-expert count (aliases included)
    routing: str
    layout: str = "per_expert"  # or "fused"
    gate_name: str = "gate_proj.weight"
    up_name: str = "up_proj.weight"
    down_name: str = "down_proj.weight"
    top_k_key: str = "num_experts_per_tok"
    group_key: str | None = None  # n_group for grouped routers
    topk_group_key: str | None = None
    memory_block_rename: tuple[str, str] | None = None  # on-disk -> in-memory block name (Mixtral)
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def block_pattern(self) -> re.Pattern:
        return re.compile(self.block_regex)

    def expert_key_regex(self) -> re.Pattern:
        """Matches an expert tensor; groups: block, layer, expert (per-expert only), name."""
        if self.layout == "per_expert":
            return re.compile(rf"^(?P<block>{self.block_regex})\.experts\.(?P<expert>\d+)\.(?P<name>.+)$")
        return re.compile(rf"^(?P<block>{self.block_regex})\.experts\.(?P<name>[A-Za-z_][\w.]*)$")

    def router_key_regex(self) -> re.Pattern:
        names = "|".join(re.escape(s) for s, _ in self.router_tensors)
        return re.compile(rf"^(?P<block>{self.block_regex})\.(?P<name>{names})$")

    # --- config helpers -------------------------------------------------------------------------
    def num_experts(self, config: dict) -> int:
        for key in self.count_keys:
            if config.get(key) is not None:
                return config_int(config, key)
        raise InputError(
            f"config.json of model_type {self.model_type!r} has none of the expert-count fields "
            f"{', '.join(self.count_keys)}"
        )

    def top_k(self, config: dict) -> int:
        if config.get(self.top_k_key) is None:
            raise InputError(f"config.json has no {self.top_k_key!r} (top-k) for {self.model_type!r}")
        return config_int(config, self.top_k_key)

    def groups(self, config: dict) -> tuple[int, int]:
        """(n_group, topk_group); (1, 1) for ungrouped routers."""
        if self.group_key is None:
            return 1, 1
        n_group = config_int(config, self.group_key) if config.get(self.group_key) else 1
        topk_group = config_int(config, self.topk_group_key) if self.topk_group_key and config.get(
            self.topk_group_key) else n_group
        return n_group, topk_group

    def routing_shape(self, config: dict) -> RoutingShape:
        """Expert count, top-k and groups of the router: what a kept expert count is checked against."""
        return RoutingShape(self.num_experts(config), self.top_k(config), *self.groups(config))

    def pruned_config(self, config: dict, kept: int, top_k: int) -> dict:
        """A copy of the original config dict with only the expert-count (and top-k) fields changed."""
        out = dict(config)
        present = [k for k in self.count_keys if k in config]
        for key in present or [self.count_keys[0]]:
            out[key] = kept
        out[self.top_k_key] = top_k
        if "experts_per_token" in config:  # GPT-OSS publishes an alias of top-k too
            out["experts_per_token"] = top_k
        return out


FAMILIES: Registry[FamilyAdapter] = Registry("MoE family")
MAX_CONFIG_COUNT = 1 << 20  # experts, top-k, groups: far above any real model, far below an overflow


def config_int(config: dict, key: str) -> int:
    """A count field of config.json: a JSON integer in 1..2**20, else ``InputError`` naming it."""
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONFIG_COUNT:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InputError(f"config.json: {key} = {shown} is not an integer between 1 and {MAX_CONFIG_COUNT}")
    return value


def register(adapter: FamilyAdapter) -> FamilyAdapter:
    """Add a family adapter (one call per family, below)."""
    return FAMILIES.add(adapter.model_type, adapter)


_MLP_BLOCK = r"(?:model\.)?layers\.(?P<layer>\d+)\.mlp"

register(FamilyAdapter(
    model_type="qwen2_moe", block_regex=_MLP_BLOCK, router_tensors=(("gate.weight", 0),),
    count_keys=("num_experts",), routing=SOFTMAX_TOPK,
    notes="shared_expert and shared_expert_gate are backbone (copied)",
))
register(FamilyAdapter(
    model_type="qwen3_moe", block_regex=_MLP_BLOCK, router_tensors=(("gate.weight", 0),),
    count_keys=("num_experts", "num_local_experts"), routing=SOFTMAX_TOPK,
    notes="published key num_experts; transformers 5 saves num_local_experts: both edited when present",
))
register(FamilyAdapter(
    model_type="olmoe", block_regex=_MLP_BLOCK, router_tensors=(("gate.weight", 0),),
    count_keys=("num_experts",), routing=SOFTMAX_TOPK,
))
register(FamilyAdapter(
    model_type="mixtral", block_regex=r"(?:model\.)?layers\.(?P<layer>\d+)\.block_sparse_moe",
    router_tensors=(("gate.weight", 0),), count_keys=("num_local_experts",), routing=SOFTMAX_TOPK,
    gate_name="w1.weight", up_name="w3.weight", down_name="w2.weight",
    memory_block_rename=(".block_sparse_moe.", ".mlp."),
))
register(FamilyAdapter(
    model_type="deepseek_v3", block_regex=_MLP_BLOCK,
    router_tensors=(("gate.weight", 0), ("gate.e_score_correction_bias", 0)),
    count_keys=("n_routed_experts",), routing=SIGMOID_GROUPED, group_key="n_group", topk_group_key="topk_group",
    notes="FP8 weight_scale_inv tensors travel with their expert; MTP layer experts pruned alike",
))
register(FamilyAdapter(
    model_type="gpt_oss", block_regex=_MLP_BLOCK,
    router_tensors=(("router.weight", 0), ("router.bias", 0)), count_keys=("num_local_experts",),
    routing=BIASED_LINEAR_TOPK, layout="fused",
    notes="experts fused on disk (gate_up_proj [E,H,2I] interleaved, biases; MXFP4 _blocks/_scales)",
))


def supported_families() -> list[str]:
    return sorted(FAMILIES)


def describe_families() -> list[dict]:
    """One row per registered family (model_type, routing, expert-count fields, layout, notes), in
    registration order: what ``moeproxy families`` lists."""
    return [{"model_type": a.model_type, "routing": a.routing, "expert_count_keys": list(a.count_keys),
             "layout": a.layout, "notes": a.notes} for a in FAMILIES.values()]


def adapter_for(config: dict, source: str = "config.json") -> FamilyAdapter:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise InputError(
            f"{source}: unsupported model_type {model_type!r}; supported MoE families: "
            f"{', '.join(supported_families())}"
        )
    return FAMILIES[model_type]
