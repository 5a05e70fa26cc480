"""Find the MoE layers of a checkpoint and classify every tensor as expert, router or backbone.

Works on tensor names and shapes only (no values). ``MoeLayer`` lists, for one MoE block, its
experts' tensors (per-expert layout: names per expert id; fused layout: 3-D tensors with experts on
dim 0) and its router tensors. Every other tensor is backbone and is copied byte for byte. The
layout is checked against config.json: each MoE layer must hold exactly the configured expert count.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from moeproxy.errors import InputError
from moeproxy.proxy.arch import FamilyAdapter
from moeproxy.proxy.checkpoint import Checkpoint


@dataclass
class MoeLayer:
    layer: int
    block: str  # e.g. "model.layers.3.mlp"
    num_experts: int
    expert_tensors: dict[int, dict[str, str]] = field(default_factory=dict)  # id -> {suffix: key}
    fused_tensors: dict[str, str] = field(default_factory=dict)  # suffix -> key
    router_tensors: dict[str, tuple[str, int]] = field(default_factory=dict)  # suffix -> (key, dim)

    def expert_bytes(self, ckpt: Checkpoint) -> int:
        keys = [k for names in self.expert_tensors.values() for k in names.values()] + list(self.fused_tensors.values())
        return sum(ckpt.tensors[k].nbytes for k in keys)


@dataclass
class MoeLayout:
    layers: list[MoeLayer]
    backbone: list[str]  # tensor names copied unchanged
    max_layer_expert_bytes: int = 0


def find_layout(ckpt: Checkpoint, adapter: FamilyAdapter) -> MoeLayout:
    expected = adapter.num_experts(ckpt.config)
    expert_re, router_re = adapter.expert_key_regex(), adapter.router_key_regex()
    layers: dict[str, MoeLayer] = {}
    backbone = []
    dims = dict(adapter.router_tensors)

    def layer_for(block: str, index: str) -> MoeLayer:
        if block not in layers:
            layers[block] = MoeLayer(int(index), block, expected)
        return layers[block]

    for name in ckpt.tensors:
        m = expert_re.match(name)
        if m:
            layer = layer_for(m["block"], m["layer"])
            if adapter.layout == "per_expert":
                layer.expert_tensors.setdefault(int(m["expert"]), {})[m["name"]] = name
            else:
                layer.fused_tensors[m["name"]] = name
            continue
        m = router_re.match(name)
        if m:
            layer_for(m["block"], m["layer"]).router_tensors[m["name"]] = (name, dims[m["name"]])
            continue
        backbone.append(name)
    if not layers:
        raise InputError(f"{ckpt.path}: no MoE expert tensors found for family {adapter.model_type!r} "
                         f"(expected keys like {adapter.block_regex}.experts...)")
    for layer in layers.values():
        where = f"{ckpt.path}: MoE block {layer.block}"
        if "weight" not in " ".join(layer.router_tensors):
            raise InputError(f"{where} has experts but no router weight ({adapter.router_tensors[0][0]})")
        if adapter.layout == "per_expert":
            ids = sorted(layer.expert_tensors)
            if ids != list(range(expected)):
                raise InputError(f"{where} holds experts {ids[:3]}...{ids[-3:]} ({len(ids)}) but config.json "
                                 f"says {expected} (ids 0..{expected - 1})")
            suffixes = {frozenset(v) for v in layer.expert_tensors.values()}
            if len(suffixes) != 1:
                raise InputError(f"{where}: experts do not all have the same tensors")
        else:
            for suffix, key in layer.fused_tensors.items():
                if ckpt.tensors[key].shape[0] != expected:
                    raise InputError(f"{where}: fused tensor {key} has {ckpt.tensors[key].shape[0]} experts "
                                     f"on dim 0, config.json says {expected}")
        for suffix, (key, dim) in layer.router_tensors.items():
            if ckpt.tensors[key].shape[dim] != expected:
                raise InputError(f"{where}: router tensor {key} has shape {ckpt.tensors[key].shape}, "
                                 f"expected {expected} experts on dim {dim}")
    ordered = sorted(layers.values(), key=lambda l: l.layer)
    return MoeLayout(ordered, backbone, max(l.expert_bytes(ckpt) for l in ordered))


def group_by_file(ckpt: Checkpoint, keys) -> dict:
    out = defaultdict(list)
    for k in keys:
        out[ckpt.tensors[k].file].append(k)
    return out
