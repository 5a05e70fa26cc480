"""The kept-expert choice as a validated parameter model (pydantic), shared by the build spec and
the build job's parameters; the rule itself lives in ``constraints.ratio_or_count_problem``."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from moeproxy.proxy.constraints import TopKMode, ratio_or_count_problem


class KeepChoice(BaseModel):
    """How many routed experts a proxy keeps in each MoE layer: exactly one of a ratio of E or a
    count (checked against the routing by ``resolve_kept_count`` where the model is known), and
    whether top-k is kept or scaled. The build spec and the build job's parameters extend it."""

    keep_ratio: float | None = Field(default=None, gt=0, le=1)
    keep_experts: int | None = Field(default=None, ge=1)
    top_k: TopKMode = "keep"

    @model_validator(mode="after")
    def _one_of_ratio_or_count(self):
        problem = ratio_or_count_problem(self.keep_ratio, self.keep_experts)
        if problem:
            raise ValueError(problem)
        return self
