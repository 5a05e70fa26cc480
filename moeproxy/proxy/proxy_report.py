"""``proxy_report.json`` as a typed model: what a proxy build kept, why, and whether it verified.

``build_proxy`` fills it (its report stage) and writes it beside the proxy; its readers (``moeproxy
build``, the build job, the Proxy page, the repro harness, the HTML report) read it through
``ProxyReport.read`` / ``model_validate`` and take the same headline (``summary``, ``headline``)
instead of picking keys each in their own way. Keys this version does not know are kept
(``extra="allow"``), so a report written by a newer moeproxy still reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPORT_NAME = "proxy_report.json"
SUMMARY_KEYS = ("family", "experts_before", "experts_after", "top_k_before", "top_k_after", "kept_experts",
                "bytes_before", "bytes_after")


class ProxyReport(BaseModel):
    model_config = ConfigDict(extra="allow")

    source: str
    output: str
    family: str
    spec: dict
    device: str
    experts_before: int
    experts_after: int
    top_k_before: int
    top_k_after: int
    top_k_mode: str
    n_group: int = 1
    topk_group: int = 1
    notes: list[str] = Field(default_factory=list)  # what a reader should know (routing, e.g.)
    moe_layers: list[int]
    kept_experts: dict[str, list[int]]  # decoder layer -> original expert ids kept (new id = position)
    clusters: dict[str, list[list[int]]]  # decoder layer -> members of each kept expert's cluster
    routing_frequency: dict[str, list[int | float]] = Field(default_factory=dict)
    features: list[str]
    config_changes: dict[str, list]  # config.json field -> [before, after]
    files_copied: list[str]
    bytes_before: int
    bytes_after: int
    layer_expert_bytes: int
    plan: dict | None = None
    seconds: dict[str, float] = Field(default_factory=dict)
    verify: dict = Field(default_factory=dict)  # verify.verify_proxy's result, or {"skipped": ...}
    peak_rss_bytes: int | None = None
    peak_accelerator_bytes: int | None = None

    @classmethod
    def read(cls, path: str | Path) -> "ProxyReport":
        """The report in ``path`` (a proxy directory or the JSON file itself); a FIFO or device there is
        an ``InputError``, never waited on or read without end."""
        from moeproxy.proxy.checkpoint import read_json_file

        path = Path(path)
        return cls.model_validate(read_json_file(path / REPORT_NAME if path.is_dir() else path, REPORT_NAME,
                                                 limit=64 << 20))

    def write(self, folder: Path) -> Path:
        """``folder/proxy_report.json``, written atomically (``moeproxy.outputs``: a temporary file
        beside it renamed into place, refused with one line if that path is a directory, FIFO or device)."""
        from moeproxy.outputs import write_text

        return write_text(Path(folder) / REPORT_NAME, json.dumps(self.model_dump(mode="json"), indent=2) + "\n",
                          "proxy report")

    @property
    def verify_passed(self) -> bool | None:
        """True/False when verified, None when verification was skipped."""
        return None if "skipped" in self.verify else bool(self.verify.get("passed"))

    def summary(self) -> dict:
        """The headline fields (family, expert and top-k counts, kept experts, bytes) and the verdict."""
        out = {k: getattr(self, k) for k in SUMMARY_KEYS}
        out["verify_passed"] = self.verify_passed
        return out

    def headline(self) -> str:
        """``experts 8 -> 4 per MoE layer, top-k 2 -> 2, verification passed``."""
        verdict = {None: "skipped", True: "passed", False: "FAILED"}[self.verify_passed]
        return (f"experts {self.experts_before} -> {self.experts_after} per MoE layer, top-k {self.top_k_before} -> "
                f"{self.top_k_after}, verification {verdict}")
