"""Build a proxy checkpoint: cluster each MoE layer's experts, keep one per cluster, stream the rest.

``build_proxy(BuildSpec)`` runs, in order:
1. checks (nothing written yet): OUT does not exist and its parent can be created and written;
   config.json, the index and every shard's safetensors header are valid (``checkpoint.open_checkpoint``:
   offsets in range and contiguous, dtype and shape matching the byte length, shard names plain
   file names), every file read is a regular file (inside ``allowed_roots`` when given); the family
   is supported, the kept count satisfies the routing and expert-parallel rules, the installed
   transformers instantiates the proxy config on meta;
2. per MoE layer: expert signatures (``features.FEATURE_METHODS[method]``), clustering and the kept
   representatives (``cluster.choose_kept_experts``), with the same E' in every layer;
3. streaming: every shard is rewritten into ``.OUT.partial-PID`` next to OUT, byte ranges only
   (``checkpoint.write_shard``): backbone tensors copied unchanged, kept experts renumbered 0..E'-1,
   router rows and biases sliced; config.json is the original dict with only the expert-count
   (and top-k) fields changed; other files (tokenizer, generation config, code) are copied;
4. the proxy is verified in the partial folder (``verify.verify_proxy``), ``proxy_report.json``
   written there, and the folder renamed to OUT last: an interrupted or killed build leaves no OUT.
   Partial folders of dead processes (a build killed with SIGKILL) are removed when a build of the
   same OUT starts.
Progress goes to an optional callback ``progress(stage, done, total, message)``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import ConfigDict, Field, model_validator

from moeproxy.devices import DeviceChoice
from moeproxy.errors import InputError
from moeproxy.proxy.arch import adapter_for
from moeproxy.proxy.checkpoint import INDEX_NAME, SINGLE_NAME, OutputTensor, open_checkpoint, slice_ranges, write_shard
from moeproxy.proxy.constraints import proxy_top_k, resolve_kept_count, routing_notes
from moeproxy.proxy.keep import KeepChoice
from moeproxy.pids import pid_alive

REPORT_NAME = "proxy_report.json"
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


def build_proxy(spec: BuildSpec, progress: ProgressFn | None = None) -> dict:
    """Build the proxy described by ``spec``; returns the proxy_report dict (also written to OUT)."""
    from moeproxy.devices import resolve_device
    from moeproxy.proxy.cluster import choose_kept_experts
    from moeproxy.proxy.features import FEATURE_METHODS, FeatureContext
    from moeproxy.proxy.heap import bound_heap_growth
    from moeproxy.proxy.layout import find_layout
    from moeproxy.proxy.plan import plan_proxy
    from moeproxy.proxy.verify import instantiate_on_meta, verify_proxy

    spec = BuildSpec.model_validate(spec.model_dump() | {"progress": spec.progress})
    bound_heap_growth()  # streamed buffers go back to the OS when freed (moeproxy.proxy.heap)
    report_progress = progress or spec.progress or (lambda *a: None)
    started = time.time()
    src, out = Path(spec.src), Path(spec.out)
    # 1. checks before writing anything: the destination first, then every input file
    check_output(out)
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
    device = resolve_device(spec.device)

    # 2. features, clusters, kept experts per layer
    ctx = FeatureContext(ckpt, adapter, layout, seed=spec.seed, device=str(device),
                         calibration=str(spec.calibration) if spec.calibration else None,
                         max_calibration_tokens=spec.max_calibration_tokens)
    clusters, feature_kind = {}, set()
    total_layers = len(layout.layers)
    report_progress("cluster", 0, total_layers, f"{spec.method} signatures, {total_layers} MoE layers")
    t_cluster = time.time()
    for done, (layer, feats) in enumerate(FEATURE_METHODS[spec.method](ctx), 1):
        # keep the choice and the routing counts, not the signatures: one layer's signatures are
        # experts x (router row + probe responses) floats, 69 MB a layer at Qwen3-235B's size
        clusters[layer.layer] = (layer, choose_kept_experts(feats.features, kept_count, shape.n_group, spec.select,
                                                            feats.frequency), feats.frequency)
        feature_kind.add(feats.kind)
        report_progress("cluster", done, total_layers, f"layer {layer.layer}")
    t_cluster = time.time() - t_cluster

    # 3. stream the shards into the partial folder; 4. verify there; rename to OUT last
    tmp = _partial_dir(out, os.getpid())
    if tmp.exists():
        shutil.rmtree(tmp)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    t_write = time.time()
    try:
        plan_by_shard: dict[str, list[OutputTensor]] = {shard: [] for shard in ckpt.shards}
        kept = {i: c.kept for i, (_, c, _) in clusters.items()}
        for layer, c, _ in clusters.values():
            new_id = {old: new for new, old in enumerate(c.kept)}
            for old, names in layer.expert_tensors.items():
                if old in new_id:
                    for suffix, key in names.items():
                        ref = ckpt.tensors[key]
                        name = f"{layer.block}.experts.{new_id[old]}.{suffix}"
                        plan_by_shard[ref.file.name].append(
                            OutputTensor(name, ref.dtype, ref.shape, ref.file, [(ref.start, ref.end)]))
            for suffix, key in list(layer.fused_tensors.items()) + [(s, k) for s, (k, d) in layer.router_tensors.items()]:
                ref = ckpt.tensors[key]
                dim = layer.router_tensors[suffix][1] if suffix in layer.router_tensors else 0
                shape_out = list(ref.shape)
                shape_out[dim] = len(c.kept)
                plan_by_shard[ref.file.name].append(
                    OutputTensor(key, ref.dtype, tuple(shape_out), ref.file, slice_ranges(ref, dim, c.kept)))
        for key in layout.backbone:
            ref = ckpt.tensors[key]
            plan_by_shard[ref.file.name].append(OutputTensor(key, ref.dtype, ref.shape, ref.file, [(ref.start, ref.end)]))
        weight_map, total_size, written = {}, 0, []
        shards = [s for s in ckpt.shards if plan_by_shard[s]]
        for n, shard in enumerate(shards, 1):
            tensors = sorted(plan_by_shard[shard], key=lambda t: t.ranges[0][0])
            total_size += write_shard(tmp / shard, tensors, ckpt.shard_metadata.get(shard))
            weight_map.update({t.name: shard for t in tensors})
            written.append(shard)
            report_progress("write", n, len(shards), shard)
        if (src / INDEX_NAME).exists() or len(written) != 1 or written[0] != SINGLE_NAME:
            meta = dict(ckpt.index_metadata)
            meta["total_size"] = total_size
            if "total_parameters" in meta:
                meta.pop("total_parameters")
            index = {"metadata": meta, "weight_map": dict(sorted(weight_map.items()))}
            (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        (tmp / "config.json").write_text(json.dumps(new_config, indent=2) + "\n")
        side_files = _copy_side_files(side_files, tmp)
        t_write = time.time() - t_write
        plan = _plan_or_none(plan_proxy, ckpt.config, kept_count, spec)
        report = {
            "source": str(src.resolve()),
            "output": str(out.resolve()),
            "family": adapter.model_type,
            "spec": json.loads(spec.model_dump_json()),
            "device": str(device),
            "experts_before": shape.num_experts,
            "experts_after": kept_count,
            "top_k_before": shape.top_k,
            "top_k_after": k_proxy,
            "top_k_mode": spec.top_k,
            "n_group": shape.n_group,
            "topk_group": shape.topk_group,
            "notes": routing_notes(shape, kept_count, spec.top_k),
            "moe_layers": [layer.layer for layer in layout.layers],
            "kept_experts": {str(i): c.kept for i, (_, c, _) in clusters.items()},
            "clusters": {str(i): c.members for i, (_, c, _) in clusters.items()},
            "routing_frequency": {str(i): f.tolist() for i, (_, _, f) in clusters.items() if f is not None},
            "features": sorted(feature_kind),
            "config_changes": {k: [ckpt.config.get(k), v] for k, v in new_config.items() if ckpt.config.get(k) != v},
            "files_copied": side_files,
            "bytes_before": ckpt.total_bytes,
            "bytes_after": total_size,
            "layer_expert_bytes": layout.max_layer_expert_bytes,
            "plan": plan,
            "seconds": {"cluster": round(t_cluster, 3), "write": round(t_write, 3)},
        }
        if spec.verify:
            steps = 2 * int(ckpt.config.get("num_hidden_layers") or len(kept))
            report_progress("verify", 0, steps, "masked full model, then proxy, layer by layer")
            t_verify = time.time()
            report["verify"] = verify_proxy(
                ckpt, open_checkpoint(tmp), adapter, kept, top_k=k_proxy if spec.top_k == "scale" else None,
                device=device, seed=spec.seed,
                progress=lambda done, total, message: report_progress("verify", min(done, total - 1), total, message))
            report["seconds"]["verify"] = round(time.time() - t_verify, 3)
            report_progress("verify", steps, steps, "passed" if report["verify"]["passed"] else "FAILED")
        else:
            report["verify"] = {"skipped": "--no-verify"}
        report["seconds"]["total"] = round(time.time() - started, 3)
        report["peak_rss_bytes"] = _peak_rss_bytes()
        from moeproxy.devices import peak_accelerator_bytes

        report["peak_accelerator_bytes"] = peak_accelerator_bytes(device)
        (tmp / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
        if out.exists() or out.is_symlink():
            raise InputError(f"{out}: was created by someone else during the build; the proxy was not written")
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def _plan_or_none(plan_proxy, config: dict, kept: int, spec: BuildSpec) -> dict | None:
    try:
        return plan_proxy(config, keep_experts=kept, top_k=spec.top_k, ep_size=spec.ep_size)
    except Exception as exc:  # planning is informative; never fail a written build over it
        return {"error": str(exc)}
