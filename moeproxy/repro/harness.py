"""Full vs proxy, end to end: build, heal, evaluate, run the scenario on both, ingest, compare.

``run_pair(HarnessSpec(...))`` writes into ``out``:

- ``proxy-build/`` the proxy from ``moeproxy.proxy.build_proxy`` (clustering, one representative per
  cluster, backbone and router kept) and ``proxy/`` the same after ``heal_steps`` supervised steps;
- ``evaluation.json`` from ``moeproxy.repro.evaluation.evaluate_pair`` (keep/reject before RL);
- ``full.jsonl`` and ``proxy.jsonl``: the scenario at the same seed on each model, verl file JSONL;
- ``fidelity.json``: ``moeproxy.fidelity.compare_runs`` on the two stored runs, plus the scenario,
  the evaluation result, the proxy build summary and each side's training summary.

Both logs are ingested into the store as ``<name>-full`` (role full) and ``<name>-proxy`` (role
proxy, proxy_of the full run); runs of the same names are replaced, and the diagnosis of each is
saved with the store's findings. Baselines (bench/fidelity.py): ``random`` keeps the same number of
experts chosen at random, by masking the others in the full model with the proxy package's masking
reference (pruning == masking, so the routing is the pruned model's, but the cost is the full
model's); ``dense`` is a dense Qwen3 with the proxy's active parameter count, pre-trained by the
same recipe (cached in ``dense_cache``); ``replica`` is the full model itself, trained on the same
prompts with another rollout sampling seed: the noise ceiling, i.e. the best agreement any proxy
can show when runs differ only in which completions were sampled.
"""

from __future__ import annotations

import gc
import json
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from moeproxy.errors import InputError
from moeproxy.registry import Registry


@dataclass
class ProxySide:
    """What a baseline hands the scenario run: the proxy model, what it is, and how to train it."""

    model: Any
    tokenizer: Any
    info: dict
    evaluation: dict | None = None  # the keep/reject evaluation, where the baseline makes one
    train_extra: dict = field(default_factory=dict)  # scenario config overrides (the replica's sampling seed)


# baseline name -> (spec, log, timings) -> ProxySide; the kinds of proxy run_pair compares (filled below)
BASELINES: Registry[Callable[..., ProxySide]] = Registry("baseline")


@dataclass
class HarnessSpec:
    scenario: str
    out: Path
    keep_ratio: float = 0.25
    steps: int = 60
    seed: int = 0
    model: str | None = None
    db: str | None = None
    name: str | None = None
    baseline: str = "cluster"
    heal_steps: int = 100
    evaluate: bool = True
    full_log: Path | None = None  # reuse an existing full-model log of the same scenario/seed/steps
    reuse_proxy: Path | None = None  # a proxy directory written by an earlier run_pair (same ratio/seed)
    dense_cache: Path | None = None
    dense_pretrain_steps: int = 500
    # a model of this shape (``TinyMoeShape``) instead of the bundled checkpoint: pretrained once
    # into ``shape_cache`` (default ``<out>/full-<shape key>``) and reused by every later pair
    shape: object | None = None
    pretrain_steps: int = 1500
    shape_cache: Path | None = None

    def __post_init__(self):
        from moeproxy.repro.scenarios import get_scenario

        get_scenario(self.scenario)
        self.out = Path(self.out)
        if not 0 < self.keep_ratio <= 1:
            raise InputError(f"--keep-ratio must be in (0, 1], got {self.keep_ratio}")
        if self.steps < 5:
            raise InputError(f"--steps must be >= 5 for a comparison, got {self.steps}")
        BASELINES.lookup(self.baseline)
        if self.heal_steps < 0:
            raise InputError(f"heal_steps must be >= 0, got {self.heal_steps}")
        if self.shape is not None and self.model:
            raise InputError("give either --model or the shape options, not both: the model has its own shape")

    @property
    def run_name(self) -> str:
        return self.name or f"repro-{self.scenario}-r{self.keep_ratio:g}-s{self.seed}"


def _full_dir(spec: HarnessSpec) -> Path:
    from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT

    if spec.model:
        return Path(spec.model)
    if spec.shape is not None:
        return Path(spec.shape_cache or spec.out / f"full-{spec.shape.key}")
    return DEFAULT_CHECKPOINT


def ensure_full_model(spec: HarnessSpec, log=print) -> Path:
    """The full checkpoint of the pair: ``--model``, the bundled one, or one of ``spec.shape``
    pretrained here the first time (``repro pretrain`` with the same recipe) and reused after."""
    from moeproxy.repro.pretrain import PretrainConfig, pretrain

    path = _full_dir(spec)
    if spec.shape is not None and not spec.model and not (path / "config.json").is_file():
        log(f"pretraining a full model of shape {spec.shape.key} ({spec.pretrain_steps} steps) into {path}")
        pretrain(PretrainConfig(steps=spec.pretrain_steps, shape=spec.shape, seed=0), path, log=log)
    return path


def build_cluster_proxy(spec: HarnessSpec, log=print) -> tuple[Path, dict]:
    """``moeproxy build`` (library call) then healing; returns (proxy dir, build summary)."""
    from moeproxy.proxy.build import BuildSpec, build_proxy
    from moeproxy.proxy.proxy_report import ProxyReport
    from moeproxy.repro.pretrain import heal

    built = spec.out / "proxy-build"
    if built.exists():
        shutil.rmtree(built)
    from moeproxy.proxy.arch import adapter_for
    from moeproxy.proxy.plan import resolve_ok

    config = json.loads((_full_dir(spec) / "config.json").read_text())
    # top-k is kept (pruning == masking) unless that breaks a routing rule (32 -> 4 experts with
    # top-4 routes every token to every expert): then it shrinks with the expert count (k * E'/E)
    top_k_mode = "keep" if resolve_ok(adapter_for(config).routing_shape(config), spec.keep_ratio, "keep", 1) else "scale"
    report = ProxyReport.model_validate(build_proxy(BuildSpec(
        src=_full_dir(spec), out=built, keep_ratio=spec.keep_ratio, seed=spec.seed, top_k=top_k_mode)))
    summary = {**report.summary(), "build_seconds": report.seconds.get("total")}
    log(f"built proxy: {summary['experts_before']} -> {summary['experts_after']} experts per layer")
    proxy = spec.out / "proxy"
    if proxy.exists():
        shutil.rmtree(proxy)
    summary["heal"] = heal(built, proxy, spec.heal_steps, seed=spec.seed, log=log)
    return proxy, summary


def random_masked_model(spec: HarnessSpec):
    """The full model with all but E' random experts per layer masked; (model, tokenizer, summary)."""
    from moeproxy.proxy.arch import adapter_for
    from moeproxy.proxy.constraints import resolve_kept_count
    from moeproxy.proxy.masking import mask_experts
    from moeproxy.repro.tiny_moe import load_tiny_moe

    model, tokenizer = load_tiny_moe(_full_dir(spec))
    config = model.config.to_dict()
    adapter = adapter_for(config)
    shape = adapter.routing_shape(config)
    kept_count = resolve_kept_count(shape, spec.keep_ratio, None, "keep", 1)
    rng = random.Random(1000 + spec.seed)
    kept = {}
    for index, layer in enumerate(model.model.layers):
        keep = sorted(rng.sample(range(shape.num_experts), kept_count))
        kept[str(index)] = keep
        mask_experts(adapter, layer, [e for e in range(shape.num_experts) if e not in keep])
    return model, tokenizer, {"experts_before": shape.num_experts, "experts_after": kept_count, "kept_experts": kept}


def dense_model(spec: HarnessSpec, log=print):
    """The dense baseline with the cluster proxy's active parameter count (pre-trained once, cached)."""
    from moeproxy.repro.grpo import active_parameters
    from moeproxy.repro.pretrain import PretrainConfig, pretrain
    from moeproxy.repro.tiny_moe import TinyMoeShape, dense_intermediate_for, load_tiny_moe

    full, _ = load_tiny_moe(_full_dir(spec))
    cfg = full.config
    shape = TinyMoeShape.from_config(cfg)  # the dense model keeps the full model's backbone
    kept = max(cfg.num_experts_per_tok, round(cfg.num_experts * spec.keep_ratio))
    router_params = cfg.num_experts * cfg.hidden_size * cfg.num_hidden_layers
    # the proxy keeps top-k, so its active count is the full one less the pruned router rows
    proxy_active = active_parameters(full) - router_params * (cfg.num_experts - kept) // cfg.num_experts
    width = dense_intermediate_for(proxy_active, shape)
    cache = Path(spec.dense_cache or spec.out / "dense-cache") / f"dense-h{shape.hidden_size}-l{shape.num_hidden_layers}-a{shape.num_attention_heads}-i{width}"
    if not (cache / "config.json").is_file():
        pretrain(PretrainConfig(steps=spec.dense_pretrain_steps, dense_intermediate_size=width, shape=shape), cache,
                 log=log)
    model, tokenizer = load_tiny_moe(cache)
    return model, tokenizer, {"dense_intermediate_size": width, "parameters": sum(p.numel() for p in model.parameters()),
                              "target_active_parameters": proxy_active, "checkpoint": str(cache),
                              "note": f"active parameters of the full model: {active_parameters(full)}"}


# The replica's sampling seed: same prompts as the full run, other rollout samples.
REPLICA_SAMPLING_OFFSET = 7919


def _cluster_baseline(spec: HarnessSpec, log, timings: dict) -> ProxySide:
    """``moeproxy build`` then healing (or a proxy an earlier run built), evaluated before RL."""
    from moeproxy.proxy.proxy_report import ProxyReport
    from moeproxy.repro.evaluation import EvalLimits, evaluate_pair, write_eval_tasks
    from moeproxy.repro.tiny_moe import load_tiny_moe

    if spec.reuse_proxy is not None:
        proxy_dir = Path(spec.reuse_proxy)
        report = ProxyReport.read(proxy_dir)
        if report.spec.get("keep_ratio") != spec.keep_ratio:
            raise InputError(f"{proxy_dir}: built at keep ratio {report.spec.get('keep_ratio')}, not {spec.keep_ratio}")
        info = {"reused": str(proxy_dir), "experts_before": report.experts_before,
                "experts_after": report.experts_after, "kept_experts": report.kept_experts}
        saved = proxy_dir.parent / "evaluation.json"
        evaluation = json.loads(saved.read_text()) if saved.is_file() else None
        return ProxySide(*load_tiny_moe(proxy_dir), info, evaluation)
    t = time.perf_counter()
    proxy_dir, info = build_cluster_proxy(spec, log=log)
    timings["build_and_heal_s"] = round(time.perf_counter() - t, 2)
    evaluation = None
    if spec.evaluate:
        t = time.perf_counter()
        tasks = spec.out / "eval_tasks.jsonl"
        write_eval_tasks(tasks)
        evaluation = evaluate_pair(_full_dir(spec), proxy_dir, tasks, EvalLimits())
        (spec.out / "evaluation.json").write_text(json.dumps(evaluation, indent=2) + "\n")
        timings["evaluate_s"] = round(time.perf_counter() - t, 2)
        log(f"evaluate: {evaluation['decision']} (exact match {evaluation['full']['exact_match']:.3f} -> "
            f"{evaluation['proxy']['exact_match']:.3f})")
    return ProxySide(*load_tiny_moe(proxy_dir), info, evaluation)


def _random_baseline(spec: HarnessSpec, log, timings: dict) -> ProxySide:
    """E' random experts per layer (the others masked in the full model), healed like the proxy."""
    from moeproxy.repro.pretrain import supervised_steps

    t = time.perf_counter()
    model, tokenizer, info = random_masked_model(spec)
    supervised_steps(model, tokenizer, spec.heal_steps, spec.seed, 1e-3)
    info["heal"] = {"steps": spec.heal_steps}
    timings["build_and_heal_s"] = round(time.perf_counter() - t, 2)
    return ProxySide(model, tokenizer, info)


def _dense_baseline(spec: HarnessSpec, log, timings: dict) -> ProxySide:
    """A dense model with the proxy's active parameter count."""
    t = time.perf_counter()
    side = ProxySide(*dense_model(spec, log=log))
    timings["build_and_heal_s"] = round(time.perf_counter() - t, 2)
    return side


def _replica_baseline(spec: HarnessSpec, log, timings: dict) -> ProxySide:
    """The full model itself with another rollout sampling seed: the noise ceiling."""
    from moeproxy.repro.tiny_moe import load_tiny_moe

    seed = spec.seed + REPLICA_SAMPLING_OFFSET
    return ProxySide(*load_tiny_moe(_full_dir(spec)),
                     {"replica": f"the full model, same prompts, sampling seed {seed}"},
                     train_extra={"sampling_seed": seed})


BASELINES.add("cluster", _cluster_baseline)
BASELINES.add("random", _random_baseline)
BASELINES.add("dense", _dense_baseline)
BASELINES.add("replica", _replica_baseline)


def full_shape_key(spec: HarnessSpec) -> str | None:
    """The full model's shape (``TinyMoeShape.key``): the scenario's settings calibrated for it
    (``scenarios.CALIBRATED``) apply to every side of the pair, proxy and baselines included."""
    from moeproxy.repro.tiny_moe import TinyMoeShape

    config = _full_dir(spec) / "config.json"
    return TinyMoeShape.from_config(json.loads(config.read_text())).key if config.is_file() else None


def _train(model, tokenizer, spec: HarnessSpec, log_path: Path, **extra) -> dict:
    from moeproxy.repro.grpo import run_grpo
    from moeproxy.repro.scenarios import get_scenario

    config = get_scenario(spec.scenario).config(spec.steps, spec.seed, shape_key=full_shape_key(spec), **extra)
    summary = run_grpo(model, tokenizer, config, log_path)
    summary.pop("config", None)
    return summary


def _ingest(store, path: Path, run: str, role: str, proxy_of: str | None = None) -> None:
    from moeproxy.ingest import ingest_paths

    if store.has_run(run):
        store.delete_run(run)
    ingest_paths(store, [path], run=run, role=role, proxy_of=proxy_of)


DEMO_SCENARIOS = ("healthy", "overflow", "divergence", "precision_mismatch", "routing_collapse")


def write_demo(out: Path, steps: int = 40, keep_ratio: float = 0.25, seed: int = 0,
               scenarios=DEMO_SCENARIOS, log=print) -> dict:
    """The bundled demo: one full + proxy pair per scenario under ``out/<scenario>/`` (logs,
    fidelity.json, evaluation.json; checkpoints removed) and ``out/manifest.json`` for
    ``moeproxy.demo``. The proxy is built, healed and evaluated once and reused by every scenario."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".build"
    manifest, summary = {"runs": []}, {}
    proxy_dir = None
    for scenario in scenarios:
        spec = HarnessSpec(scenario=scenario, out=work / scenario, keep_ratio=keep_ratio, steps=steps, seed=seed,
                           db=":memory:", name=f"demo-{scenario}", reuse_proxy=proxy_dir)
        result = run_pair(spec, log=log)
        if proxy_dir is None:
            proxy_dir = work / scenario / "proxy"
        target = out / scenario
        target.mkdir(exist_ok=True)
        for name in ("full.jsonl", "proxy.jsonl", "fidelity.json"):
            shutil.copy2(work / scenario / name, target / name)
        if (work / scenario / "evaluation.json").is_file():
            shutil.copy2(work / scenario / "evaluation.json", target / "evaluation.json")
        full_run = f"{scenario}-full"
        manifest["runs"].append({"name": full_run, "path": f"{scenario}/full.jsonl", "role": "full"})
        manifest["runs"].append({"name": f"{scenario}-proxy", "path": f"{scenario}/proxy.jsonl", "role": "proxy",
                                 "proxy_of": full_run})
        summary[scenario] = {"full": result["full"], "proxy": result["proxy"], "verdict_match": result["verdict_match"]}
        log(f"{scenario}: full {result['full']['verdict']}@{result['full']['onset_step']}, "
            f"proxy {result['proxy']['verdict']}@{result['proxy']['onset_step']}")
    manifest["generated_by"] = (f"moeproxy repro demo --out {out} --steps {steps} --keep-ratio {keep_ratio} --seed {seed}")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return summary


def run_pair(spec: HarnessSpec, log=print) -> dict:
    import torch

    from moeproxy.diagnose.record import diagnose_and_record
    from moeproxy.fidelity import compare_runs
    from moeproxy.repro.scenarios import get_scenario
    from moeproxy.repro.tiny_moe import load_tiny_moe
    from moeproxy.store import Store

    started = time.perf_counter()
    spec.out.mkdir(parents=True, exist_ok=True)
    ensure_full_model(spec, log)
    scenario = get_scenario(spec.scenario)
    timings = {}

    proxy = BASELINES.lookup(spec.baseline)(spec, log, timings)
    evaluation, proxy_info = proxy.evaluation, proxy.info

    torch.manual_seed(spec.seed)
    full_log = spec.out / "full.jsonl"
    t = time.perf_counter()
    if spec.full_log is not None and Path(spec.full_log).resolve() != full_log.resolve():
        shutil.copy2(spec.full_log, full_log)
        full_summary = {"reused": str(spec.full_log)}
    elif spec.full_log is not None:
        full_summary = {"reused": str(spec.full_log)}
    else:
        full_model, full_tok = load_tiny_moe(_full_dir(spec))
        full_summary = _train(full_model, full_tok, spec, full_log)
        log(f"full run: {spec.steps} steps, {full_summary['step_time_median_s']:.3f} s/step")
        del full_model  # the proxy run's memory is measured without the full model resident
        gc.collect()
    timings["full_rl_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    proxy_summary = _train(proxy.model, proxy.tokenizer, spec, spec.out / "proxy.jsonl", **proxy.train_extra)
    timings["proxy_rl_s"] = round(time.perf_counter() - t, 2)
    log(f"proxy run: {spec.steps} steps, {proxy_summary['step_time_median_s']:.3f} s/step")

    store = Store(spec.db)
    full_run, proxy_run = f"{spec.run_name}-full", f"{spec.run_name}-proxy"
    _ingest(store, full_log, full_run, "full")
    _ingest(store, spec.out / "proxy.jsonl", proxy_run, "proxy", proxy_of=full_run)
    for run in (full_run, proxy_run):
        diagnose_and_record(store, run)
    result = compare_runs(store, full_run, proxy_run)
    timings["total_s"] = round(time.perf_counter() - started, 2)
    result.update({
        "scenario": {"name": scenario.name, "description": scenario.description,
                     "expected_verdict": scenario.expected_verdict,
                     "config": asdict(scenario.config(spec.steps, spec.seed, shape_key=full_shape_key(spec))),
                     "full_shape": full_shape_key(spec)},
        "keep_ratio": spec.keep_ratio,
        "seed": spec.seed,
        "steps": spec.steps,
        "baseline": spec.baseline,
        "evaluation": None if evaluation is None else {
            "decision": evaluation["decision"], "reasons": evaluation["reasons"],
            "quality_drop": evaluation["quality_drop"], "perplexity_ratio": evaluation["perplexity_ratio"],
            "exact_match": {"full": evaluation["full"]["exact_match"], "proxy": evaluation["proxy"]["exact_match"]},
            "tokens_per_s": {"full": evaluation["full"]["tokens_per_s"], "proxy": evaluation["proxy"]["tokens_per_s"]},
            "peak_memory_bytes": {"full": evaluation["full"]["peak_memory_bytes"],
                                  "proxy": evaluation["proxy"]["peak_memory_bytes"]},
        },
        "proxy_build": proxy_info,
        "training": {"full": full_summary, "proxy": proxy_summary},
        "timings": timings,
        "store": store.label,
    })
    result["cost"]["model_state_bytes"] = {
        "full": full_summary.get("model_state_bytes"), "proxy": proxy_summary.get("model_state_bytes"),
    }
    if full_summary.get("model_state_bytes"):
        result["cost"]["model_state_bytes"]["ratio"] = round(proxy_summary["model_state_bytes"] / full_summary["model_state_bytes"], 4)
    (spec.out / "fidelity.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result
