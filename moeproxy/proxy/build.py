"""Build a proxy checkpoint: cluster each MoE layer's experts, keep one per cluster, stream the rest.

``build_proxy(BuildSpec)`` runs five named stages that share typed results:
1. ``resolve_and_check`` (nothing written yet): OUT does not exist and its parent can be created and
   written; config.json, the index and every shard's safetensors header are valid
   (``checkpoint.open_checkpoint``: offsets in range and contiguous, dtype and shape matching the
   byte length, shard names plain file names), every file read is a regular file (inside
   ``allowed_roots`` when given); the family is supported, the kept count satisfies the routing and
   expert-parallel rules, the installed transformers instantiates the proxy config on meta -> ``Resolved``;
2. ``choose_experts``: per MoE layer, expert signatures (``features.FEATURE_METHODS[method]``),
   clustering and the kept representatives (``cluster.choose_kept_experts``), with the same E' in
   every layer -> ``Chosen``;
3. ``write_shards``: every shard is rewritten into ``.OUT.partial-PID`` next to OUT, byte ranges only
   (``checkpoint.write_shard``): backbone tensors copied unchanged, kept experts renumbered 0..E'-1,
   router rows and biases sliced; config.json is the original dict with only the expert-count (and
   top-k) fields changed; other files (tokenizer, generation config, code) are copied -> ``Written``;
4. ``make_report``: the typed ``proxy_report.ProxyReport`` (what was kept and why, sizes, plan, notes);
5. ``verify_built``: the proxy in the partial folder against the masked full model
   (``verify.verify_proxy``); a checkpoint that does not load as its config.json describes (hidden or
   expert intermediate size disagreeing with the tensors) fails the build here; then
   ``proxy_report.json`` is written there (atomically, ``moeproxy.outputs``) and the folder renamed to
   OUT last: a failed, interrupted or killed build leaves no OUT, and the parent folders it created
   are removed again (never one that existed before). Partial folders of dead processes (a build
   killed with SIGKILL) are removed when a build of the same OUT starts.
Progress goes to an optional callback ``progress(stage, done, total, message)``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from pydantic import ConfigDict, Field, model_validator

from moeproxy.devices import DeviceChoice
from moeproxy.errors import InputError
from moeproxy.outputs import make_parents, remove_created_folders
from moeproxy.proxy.arch import FamilyAdapter, adapter_for
from moeproxy.proxy.checkpoint import (INDEX_NAME, SINGLE_NAME, Checkpoint, OutputTensor, open_checkpoint, slice_ranges,
                                       write_shard)
from moeproxy.proxy.constraints import RoutingShape, proxy_top_k, resolve_kept_count, routing_notes
from moeproxy.proxy.keep import KeepChoice
from moeproxy.pids import pid_alive
from moeproxy.proxy.proxy_report import REPORT_NAME, ProxyReport  # noqa: F401  (REPORT_NAME re-exported)

if TYPE_CHECKING:
    from moeproxy.proxy.cluster import LayerClusters
    from moeproxy.proxy.layout import MoeLayer, MoeLayout

ProgressFn = Callable[[str, int, int, str], None]


class BuildSpec(KeepChoice):
    """Everything a proxy build needs; serialises to JSON (without the progress callback).
    ``keep_ratio``/``keep_experts``/``top_k`` and their rule come from ``KeepChoice``."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    src: Path
    out: Path
    method: Literal["weights", "activations"] = "weights"
    calibration: Path | None = None
    max_calibration_tokens: int = Field(default=4096, ge=1)
    select: Literal["medoid", "frequency"] = "medoid"
    device: DeviceChoice = "auto"
    seed: int = 0
    ep_size: int = Field(default=1, ge=1)
    verify: bool = True
    allowed_roots: list[Path] | None = None  # when set, every file read must resolve inside one of them
    progress: Any = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _method_needs(self):
        if self.method == "activations" and self.calibration is None:
            raise ValueError("method 'activations' needs a calibration file")
        if self.select == "frequency" and self.method != "activations":
            raise ValueError("select 'frequency' needs routing statistics: use method 'activations'")
        return self


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _side_files(src: Path, shards: set[str], inside) -> list[Path]:
    """Files copied beside the shards (tokenizer, generation config, code); each must be a regular file."""
    import stat

    files = []
    for item in sorted(src.iterdir()):
        if item.name in shards or item.name in ("config.json", INDEX_NAME, REPORT_NAME):
            continue
        if item.suffix in (".safetensors", ".bin", ".pt", ".pth", ".gguf"):
            continue  # other weight files are not part of the proxy
        try:
            mode = item.stat().st_mode
        except OSError as exc:
            raise InputError(f"{item}: {exc.strerror or exc} (a file of the checkpoint directory)") from None
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise InputError(f"{item}: not a regular file (FIFO, device or socket); remove it from the checkpoint")
        inside(item, "checkpoint file")
        files.append(item)
    return files


def _copy_side_files(files: list[Path], dst: Path) -> list[str]:
    from moeproxy.proxy.checkpoint import open_regular

    for item in files:
        with open_regular(item, "checkpoint file") as fh, open(dst / item.name, "wb") as out:
            shutil.copyfileobj(fh, out)
        shutil.copystat(item, dst / item.name)
    return [item.name for item in files]


def _partial_dir(out: Path, pid: int) -> Path:
    return out.parent / f".{out.name}.partial-{pid}"


def remove_stale_partials(out: Path) -> list[Path]:
    """Remove ``.OUT.partial-PID`` folders whose process is gone (a build killed with SIGKILL)."""
    removed = []
    prefix = f".{out.name}.partial-"
    try:
        entries = list(out.parent.iterdir()) if out.parent.is_dir() else []
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name[len(prefix):]
        if entry.name.startswith(prefix) and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def check_output(out: Path) -> None:
    """OUT must not exist and its nearest existing ancestor must be a writable directory (checked
    before any work, so a read-only destination fails in milliseconds, not after clustering)."""
    shown = str(out) if len(str(out)) <= 200 else str(out)[:197] + "..."
    if "\0" in str(out):
        raise InputError(f"output directory {shown!r}: contains a NUL byte")
    try:
        if out.exists() or out.is_symlink():
            raise InputError(f"{out}: already exists; choose a new output directory")
        ancestor = out.absolute().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
    except (OSError, ValueError) as exc:
        raise InputError(f"output directory {shown}: {getattr(exc, 'strerror', None) or exc}") from None
    if not ancestor.is_dir():
        raise InputError(f"output directory {shown}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"output directory {shown}: {ancestor} is not writable")


def _inside_roots(roots: list[Path] | None):
    """A check ``(path, what) -> path`` that every file read lies inside ``roots`` (no-op without roots)."""
    if not roots:
        return lambda path, what: path
    from moeproxy.allowed_paths import resolve_inside_roots

    return lambda path, what: resolve_inside_roots(path, what, roots)


# -- the stages of a build -------------------------------------------------------------------------
@dataclass
class Resolved:
    """Stage 1's answer: the checked inputs and the proxy's shape (nothing written yet)."""

    src: Path
    out: Path
    ckpt: Checkpoint
    side_files: list[Path]
    adapter: FamilyAdapter
    shape: RoutingShape
    kept_count: int
    top_k: int  # the proxy's top-k
    config: dict  # the proxy's config.json
    layout: MoeLayout
    device: Any  # torch.device


@dataclass
class Chosen:
    """Stage 2's answer: per MoE decoder layer, its layout, the kept experts and their clusters."""

    layers: dict[int, tuple[MoeLayer, LayerClusters, Any]]  # layer -> (layout, clusters, routing frequency)
    feature_kinds: set[str]
    seconds: float

    @property
    def kept(self) -> dict[int, list[int]]:
        return {i: c.kept for i, (_, c, _) in self.layers.items()}


@dataclass
class Written:
    """Stage 3's answer: what went into the partial folder."""

    total_size: int
    files_copied: list[str]
    seconds: float


def resolve_and_check(spec: BuildSpec) -> Resolved:
    """1. Every check before any work: the destination, every input file, the family, the kept count
    against the routing and expert-parallel rules, the proxy config on the installed transformers."""
    from moeproxy.devices import resolve_device
    from moeproxy.proxy.layout import find_layout
    from moeproxy.proxy.verify import instantiate_on_meta

    src, out = Path(spec.src), Path(spec.out)
    check_output(out)  # the destination first: a read-only one fails in milliseconds
    remove_stale_partials(out)
    inside = _inside_roots(spec.allowed_roots)
    ckpt = open_checkpoint(src, inside=inside)
    side_files = _side_files(src, set(ckpt.shards), inside)
    adapter = adapter_for(ckpt.config, str(src / "config.json"))
    shape = adapter.routing_shape(ckpt.config)
    kept_count = resolve_kept_count(shape, spec.keep_ratio, spec.keep_experts, spec.top_k, spec.ep_size)
    k_proxy = proxy_top_k(shape, kept_count, spec.top_k)
    new_config = adapter.pruned_config(ckpt.config, kept_count, k_proxy)
    try:
        instantiate_on_meta(new_config)
    except Exception as exc:
        reason = " ".join(str(exc).split())  # one line: pydantic and transformers errors span several
        raise InputError(f"the installed transformers cannot instantiate the proxy config "
                         f"({kept_count} experts, top-k {k_proxy}): {type(exc).__name__}: {reason[:300]}") from exc
    layout = find_layout(ckpt, adapter)
    if spec.calibration is not None:
        inside(Path(spec.calibration), "calibration file")
    return Resolved(src, out, ckpt, side_files, adapter, shape, kept_count, k_proxy, new_config, layout,
                    resolve_device(spec.device))


def choose_experts(r: Resolved, spec: BuildSpec, progress: ProgressFn) -> Chosen:
    """2. Per MoE layer: expert signatures (``FEATURE_METHODS[spec.method]``), clusters, one kept
    representative per cluster; the same E' in every layer."""
    from moeproxy.proxy.cluster import choose_kept_experts
    from moeproxy.proxy.features import FEATURE_METHODS, FeatureContext

    ctx = FeatureContext(r.ckpt, r.adapter, r.layout, seed=spec.seed, device=str(r.device),
                         calibration=str(spec.calibration) if spec.calibration else None,
                         max_calibration_tokens=spec.max_calibration_tokens)
    layers, kinds = {}, set()
    total = len(r.layout.layers)
    progress("cluster", 0, total, f"{spec.method} signatures, {total} MoE layers")
    started = time.time()
    for done, (layer, feats) in enumerate(FEATURE_METHODS.lookup(spec.method)(ctx), 1):
        # keep the choice and the routing counts, not the signatures: one layer's signatures are
        # experts x (router row + probe responses) floats, 69 MB a layer at Qwen3-235B's size
        layers[layer.layer] = (layer, choose_kept_experts(feats.features, r.kept_count, r.shape.n_group, spec.select,
                                                          feats.frequency), feats.frequency)
        kinds.add(feats.kind)
        progress("cluster", done, total, f"layer {layer.layer}")
    return Chosen(layers, kinds, time.time() - started)


def _output_tensors(r: Resolved, chosen: Chosen) -> dict[str, list[OutputTensor]]:
    """Shard name -> the tensors it holds in the proxy: kept experts renumbered 0..E'-1, router rows
    and biases (and fused expert tensors) sliced to the kept experts, backbone tensors whole."""
    by_shard: dict[str, list[OutputTensor]] = {shard: [] for shard in r.ckpt.shards}
    for layer, c, _ in chosen.layers.values():
        new_id = {old: new for new, old in enumerate(c.kept)}
        for old, names in layer.expert_tensors.items():
            if old in new_id:
                for suffix, key in names.items():
                    ref = r.ckpt.tensors[key]
                    name = f"{layer.block}.experts.{new_id[old]}.{suffix}"
                    by_shard[ref.file.name].append(OutputTensor(name, ref.dtype, ref.shape, ref.file,
                                                                [(ref.start, ref.end)]))
        for suffix, key in list(layer.fused_tensors.items()) + [(s, k) for s, (k, d) in layer.router_tensors.items()]:
            ref = r.ckpt.tensors[key]
            dim = layer.router_tensors[suffix][1] if suffix in layer.router_tensors else 0
            shape_out = list(ref.shape)
            shape_out[dim] = len(c.kept)
            by_shard[ref.file.name].append(
                OutputTensor(key, ref.dtype, tuple(shape_out), ref.file, slice_ranges(ref, dim, c.kept)))
    for key in r.layout.backbone:
        ref = r.ckpt.tensors[key]
        by_shard[ref.file.name].append(OutputTensor(key, ref.dtype, ref.shape, ref.file, [(ref.start, ref.end)]))
    return by_shard


def write_shards(r: Resolved, chosen: Chosen, tmp: Path, progress: ProgressFn) -> Written:
    """3. Stream every shard into ``tmp`` (byte ranges only), then the index (when the source has one
    or the proxy has several shards), config.json (only the expert-count and top-k fields changed)
    and the side files (tokenizer, generation config, code)."""
    started = time.time()
    by_shard = _output_tensors(r, chosen)
    weight_map, total_size = {}, 0
    shards = [s for s in r.ckpt.shards if by_shard[s]]
    for n, shard in enumerate(shards, 1):
        tensors = sorted(by_shard[shard], key=lambda t: t.ranges[0][0])
        total_size += write_shard(tmp / shard, tensors, r.ckpt.shard_metadata.get(shard))
        weight_map.update({t.name: shard for t in tensors})
        progress("write", n, len(shards), shard)
    if (r.src / INDEX_NAME).exists() or len(shards) != 1 or shards[0] != SINGLE_NAME:
        meta = dict(r.ckpt.index_metadata)
        meta["total_size"] = total_size
        meta.pop("total_parameters", None)
        index = {"metadata": meta, "weight_map": dict(sorted(weight_map.items()))}
        (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    (tmp / "config.json").write_text(json.dumps(r.config, indent=2) + "\n")
    copied = _copy_side_files(r.side_files, tmp)
    return Written(total_size, copied, time.time() - started)


def make_report(r: Resolved, chosen: Chosen, written: Written, spec: BuildSpec) -> ProxyReport:
    """4. What was kept and why, the size before and after, the plan, the routing notes."""
    from moeproxy.proxy.plan import plan_proxy

    return ProxyReport(
        source=str(r.src.resolve()), output=str(r.out.resolve()), family=r.adapter.model_type,
        spec=json.loads(spec.model_dump_json()), device=str(r.device),
        experts_before=r.shape.num_experts, experts_after=r.kept_count, top_k_before=r.shape.top_k,
        top_k_after=r.top_k, top_k_mode=spec.top_k, n_group=r.shape.n_group, topk_group=r.shape.topk_group,
        notes=routing_notes(r.shape, r.kept_count, spec.top_k),
        moe_layers=[layer.layer for layer in r.layout.layers],
        kept_experts={str(i): c.kept for i, (_, c, _) in chosen.layers.items()},
        clusters={str(i): c.members for i, (_, c, _) in chosen.layers.items()},
        routing_frequency={str(i): f.tolist() for i, (_, _, f) in chosen.layers.items() if f is not None},
        features=sorted(chosen.feature_kinds),
        config_changes={k: [r.ckpt.config.get(k), v] for k, v in r.config.items() if r.ckpt.config.get(k) != v},
        files_copied=written.files_copied, bytes_before=r.ckpt.total_bytes, bytes_after=written.total_size,
        layer_expert_bytes=r.layout.max_layer_expert_bytes,
        plan=_plan_or_none(plan_proxy, r.ckpt.config, r.kept_count, spec),
        seconds={"cluster": round(chosen.seconds, 3), "write": round(written.seconds, 3)},
    )


def verify_built(r: Resolved, chosen: Chosen, tmp: Path, spec: BuildSpec, progress: ProgressFn) -> dict:
    """5. The proxy in ``tmp`` against the full model with the removed experts masked, layer by layer."""
    from moeproxy.proxy.verify import verify_proxy

    if not spec.verify:
        return {"skipped": "--no-verify"}
    steps = 2 * int(r.ckpt.config.get("num_hidden_layers") or len(chosen.layers))
    # the layers' own steps count to ``total``, the verdict is one step more: every line its own count
    progress("verify", 0, steps + 1, "masked full model, then proxy, layer by layer")
    result = verify_proxy(
        r.ckpt, open_checkpoint(tmp), r.adapter, chosen.kept, top_k=r.top_k if spec.top_k == "scale" else None,
        device=r.device, seed=spec.seed,
        progress=lambda done, total, message: progress("verify", min(done, total), total + 1, message))
    progress("verify", steps + 1, steps + 1, "passed" if result["passed"] else "FAILED")
    return result


def build_proxy(spec: BuildSpec, progress: ProgressFn | None = None) -> dict:
    """Build the proxy described by ``spec``; returns the proxy report as a dict (also written to
    OUT/proxy_report.json). The five stages above run in order; stages 3-5 work in a partial folder
    that becomes OUT only when all of them succeeded."""
    from moeproxy.devices import peak_accelerator_bytes
    from moeproxy.proxy.heap import bound_heap_growth

    spec = BuildSpec.model_validate(spec.model_dump() | {"progress": spec.progress})
    bound_heap_growth()  # streamed buffers go back to the OS when freed (moeproxy.proxy.heap)
    report_progress = progress or spec.progress or (lambda *a: None)
    started = time.time()
    resolved = resolve_and_check(spec)
    chosen = choose_experts(resolved, spec, report_progress)
    out = resolved.out
    tmp = _partial_dir(out, os.getpid())
    if tmp.exists():
        shutil.rmtree(tmp)
    created: list[Path] = []  # OUT's parent folders this build made: removed again if it fails
    try:
        make_parents(out.parent, created)
        tmp.mkdir()
        written = write_shards(resolved, chosen, tmp, report_progress)
        report = make_report(resolved, chosen, written, spec)
        t_verify = time.time()
        report.verify = verify_built(resolved, chosen, tmp, spec, report_progress)
        _fail_if_unloadable(resolved, report.verify)
        if spec.verify:
            report.seconds["verify"] = round(time.time() - t_verify, 3)
        report.seconds["total"] = round(time.time() - started, 3)
        report.peak_rss_bytes = _peak_rss_bytes()
        report.peak_accelerator_bytes = peak_accelerator_bytes(resolved.device)
        report.write(tmp)
        if out.exists() or out.is_symlink():
            raise InputError(f"{out}: was created by someone else during the build; the proxy was not written")
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_created_folders(created)  # never a folder that existed before the build
        raise
    return report.model_dump(mode="json")


def _fail_if_unloadable(r: Resolved, verify: dict) -> None:
    """A proxy whose source or own checkpoint does not load as its config describes (config.json
    disagreeing with the tensors: hidden size, expert intermediate size) is no proxy: the build fails
    with one line and leaves no OUT. A proxy that loads but differs numerically is still written,
    with the failed verification in its report (exit status 1)."""
    if verify.get("loads") is False or verify.get("instantiates") is False:
        reason = " ".join(str(verify.get("error") or "it could not be loaded").split())
        raise InputError(f"{r.src}: the checkpoint does not load as its config.json describes, so no proxy "
                         f"was written: {reason[:400]}")


def _plan_or_none(plan_proxy, config: dict, kept: int, spec: BuildSpec) -> dict | None:
    try:
        return plan_proxy(config, keep_experts=kept, top_k=spec.top_k, ep_size=spec.ep_size)
    except Exception as exc:  # planning is informative; never fail a written build over it
        return {"error": str(exc)}
