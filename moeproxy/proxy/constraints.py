"""Rules a kept expert count must satisfy so stock loaders and routers still work.

E' experts are kept in every MoE layer (uniform). For a router with ``n_group`` groups choosing
``topk_group`` of them (DeepSeek-V3 style), each group keeps E'/n_group experts, which must be at
least 2 (the group score is a top-2 sum) and leave at least top-k candidates in the chosen groups:
transformers sets the other groups' scores to -inf before the top-k, so with exactly top-k
candidates every expert of the chosen groups is used and the router still chooses the groups (valid;
``routing_notes`` says so in the proxy report), while with fewer the full model would pick masked
experts. E' must exceed the (possibly scaled) top-k, or the router has nothing to choose; and it
must divide by the expert-parallel size. ``resolve_kept_count`` turns a ratio or a count into a
checked E', or raises ``InputError`` naming the failed rule and the nearest valid counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from moeproxy.errors import InputError

TopKMode = Literal["keep", "scale"]
TOP_K_MODES: tuple[str, ...] = get_args(TopKMode)
# keep:  num_experts_per_tok unchanged (default). Pruning then equals masking the removed experts in
#        the full model, and the active parameters per token stay the same.
# scale: top-k shrinks with the expert count, k' = max(1, round(k * E'/E)); per-token compute drops
#        by the same factor. Exact when each kept expert stands for E/E' identical ones.


def ratio_or_count_problem(keep_ratio: float | None, keep_experts: int | None) -> str | None:
    """The one rule of how a kept count is asked for: exactly one of a ratio or a count."""
    if (keep_ratio is None) == (keep_experts is None):
        return "give exactly one of keep_ratio or keep_experts (--keep-ratio or --keep-experts)"
    return None


@dataclass(frozen=True)
class RoutingShape:
    num_experts: int
    top_k: int
    n_group: int = 1
    topk_group: int = 1


def proxy_top_k(shape: RoutingShape, kept: int, mode: str) -> int:
    if mode not in TOP_K_MODES:
        raise InputError(f"unknown top-k mode {mode!r}; choose one of {', '.join(TOP_K_MODES)}")
    if mode == "keep":
        return shape.top_k
    return max(1, round(shape.top_k * kept / shape.num_experts))


def violations(shape: RoutingShape, kept: int, top_k_mode: str = "keep", ep_size: int = 1) -> list[str]:
    """Every rule ``kept`` breaks, as readable sentences (empty when valid)."""
    problems = []
    e, g = shape.num_experts, shape.n_group
    if not 1 <= kept <= e:
        return [f"kept experts {kept} must be between 1 and {e}"]
    k = proxy_top_k(shape, kept, top_k_mode)
    if kept <= k:
        problems.append(f"kept experts {kept} must exceed top-k {k} (otherwise every token uses every expert)")
    if g > 1:
        if kept % g:
            problems.append(f"kept experts {kept} must be divisible by n_group {g}")
        else:
            per_group = kept // g
            if per_group < 2:
                problems.append(f"each of the {g} groups must keep >= 2 experts (group score is a top-2 sum); got {per_group}")
            if shape.topk_group * per_group < k:
                problems.append(
                    f"topk_group {shape.topk_group} x {per_group} experts per group = "
                    f"{shape.topk_group * per_group} candidates must be at least top-k {k}"
                )
    if ep_size > 1 and kept % ep_size:
        problems.append(f"kept experts {kept} must be divisible by the expert-parallel size {ep_size}")
    return problems


def routing_notes(shape: RoutingShape, kept: int, top_k_mode: str = "keep") -> list[str]:
    """What a valid ``kept`` changes about routing that a reader of the proxy report should know."""
    notes = []
    k = proxy_top_k(shape, kept, top_k_mode)
    if shape.n_group > 1 and kept % shape.n_group == 0 and shape.topk_group * (kept // shape.n_group) == k:
        notes.append(
            f"topk_group {shape.topk_group} x {kept // shape.n_group} experts per group = top-k {k} candidates: "
            f"every kept expert of the chosen groups is used; the router still chooses the groups "
            f"(the other groups are masked with -inf before the top-k, as in the full model)")
    return notes


def valid_counts(shape: RoutingShape, top_k_mode: str = "keep", ep_size: int = 1) -> list[int]:
    return [n for n in range(1, shape.num_experts + 1) if not violations(shape, n, top_k_mode, ep_size)]


def resolve_kept_count(
    shape: RoutingShape,
    keep_ratio: float | None = None,
    keep_experts: int | None = None,
    top_k_mode: str = "keep",
    ep_size: int = 1,
) -> int:
    """Check and return E' from exactly one of a ratio or a count."""
    problem = ratio_or_count_problem(keep_ratio, keep_experts)
    if problem:
        raise InputError(problem)
    if keep_ratio is not None:
        if not 0 < keep_ratio <= 1:
            raise InputError(f"--keep-ratio {keep_ratio} must be in (0, 1]")
        exact = keep_ratio * shape.num_experts
        kept = round(exact)
        what = f"--keep-ratio {keep_ratio} ({keep_ratio} x {shape.num_experts} = {exact:g} -> {kept} experts)"
    else:
        kept = int(keep_experts)
        what = f"--keep-experts {kept}"
    problems = violations(shape, kept, top_k_mode, ep_size)
    if problems:
        valid = valid_counts(shape, top_k_mode, ep_size)
        below = [n for n in valid if n < kept][-2:]
        above = [n for n in valid if n > kept][:2]
        near = below + above
        hint = (
            "nearest valid counts: " + ", ".join(f"{n} (ratio {n / shape.num_experts:g})" for n in near)
            if near else "no kept count is valid for this model"
        )
        raise InputError(f"{what} is invalid: {'; '.join(problems)}; {hint}")
    return kept
