"""Benchmark `moeproxy build --method weights --keep-ratio 0.25` on a synthetic >= 2 GB checkpoint.

Writes a Qwen3-MoE-layout checkpoint (64 experts per layer, bf16, sharded, random weights) into a
temporary directory, then times (a) a plain copy of the same files and (b) the build, run as a child
process (`moeproxy build`), once with verification and once with --no-verify. Reports wall time and
the child's peak RSS (resource.getrusage(RUSAGE_CHILDREN) read after each child in a fresh helper).
Targets (issue 4): build within 3x the copy time; peak RSS below 1.5 x one layer's expert bytes + 600 MB.
The verify line gives the end-to-end logit difference and the worst per-layer difference as a
fraction of its tolerance (each proxy layer run on the masked full model's recorded inputs).
Temporary files are deleted at the end unless --keep-tmp (which prints their directory).
Usage: python bench/build.py [--layers 8] [--keep-tmp] [--trace]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN, MOE_I, EXPERTS, VOCAB, HEADS, KV, HEAD_DIM = 1024, 768, 64, 32000, 8, 2, 128


def write_checkpoint(path: Path, layers: int) -> int:
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    config = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": HIDDEN,
        "intermediate_size": 3072, "moe_intermediate_size": MOE_I, "num_experts": EXPERTS,
        "num_experts_per_tok": 8, "norm_topk_prob": True, "num_hidden_layers": layers,
        "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM, "vocab_size": VOCAB,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
        "hidden_act": "silu",
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    gen = torch.Generator().manual_seed(0)

    def rnd(*shape, scale=0.02):
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)

    weight_map, total = {}, 0
    shards = [{"model.embed_tokens.weight": rnd(VOCAB, HIDDEN), "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
               "lm_head.weight": rnd(VOCAB, HIDDEN)}]
    for i in range(layers):
        p = f"model.layers.{i}."
        t = {p + "input_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
             p + "post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
             p + "self_attn.q_proj.weight": rnd(HEADS * HEAD_DIM, HIDDEN),
             p + "self_attn.k_proj.weight": rnd(KV * HEAD_DIM, HIDDEN),
             p + "self_attn.v_proj.weight": rnd(KV * HEAD_DIM, HIDDEN),
             p + "self_attn.o_proj.weight": rnd(HIDDEN, HEADS * HEAD_DIM),
             p + "self_attn.q_norm.weight": torch.ones(HEAD_DIM, dtype=torch.bfloat16),
             p + "self_attn.k_norm.weight": torch.ones(HEAD_DIM, dtype=torch.bfloat16),
             p + "mlp.gate.weight": rnd(EXPERTS, HIDDEN, scale=0.1)}
        for e in range(EXPERTS):
            q = f"{p}mlp.experts.{e}."
            t[q + "gate_proj.weight"] = rnd(MOE_I, HIDDEN)
            t[q + "up_proj.weight"] = rnd(MOE_I, HIDDEN)
            t[q + "down_proj.weight"] = rnd(HIDDEN, MOE_I)
        shards.append(t)
    n = len(shards)
    for j, t in enumerate(shards, 1):
        name = f"model-{j:05d}-of-{n:05d}.safetensors"
        save_file(t, str(path / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in t})
        total += sum(v.numel() * v.element_size() for v in t.values())
        shards[j - 1] = None
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return total


def timed_child(cmd: list[str]) -> tuple[float, int, str]:
    """Run ``cmd`` under a helper that reports its own children's peak RSS; returns (seconds, rss, output)."""
    helper = ("import resource,subprocess,sys,time,json;t=time.time();"
              "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
              "print(json.dumps([time.time()-t,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss*1024,"
              "p.returncode,p.stdout[-2000:]+p.stderr[-2000:]]))")
    res = subprocess.run([sys.executable, "-c", helper, *cmd], capture_output=True, text=True, check=True)
    seconds, rss, rc, out = json.loads(res.stdout)
    if rc != 0:
        raise SystemExit(f"command failed ({rc}): {' '.join(cmd)}\n{out}")
    return seconds, rss, out


def resident_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1e3 for line in fh if line.startswith("VmRSS:"))


def trace_build(src: Path, out: Path) -> None:
    """Run the build in this process, printing resident memory at every progress event and each
    stage's peak (VmRSS sampled every 2 ms by a thread; torch allocations are invisible to tracemalloc)."""
    import threading

    state = {"stage": "imports", "peak": {}}

    def sample():
        while True:
            rss = resident_mb()
            state["peak"][state["stage"]] = max(state["peak"].get(state["stage"], 0.0), rss)
            time.sleep(0.002)

    threading.Thread(target=sample, daemon=True).start()
    import sklearn  # noqa: F401  (the CLI imports these too)
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from moeproxy.proxy.build import BuildSpec, build_proxy

    print(f"  after imports: {resident_mb():.0f} MB")
    state["stage"] = "checks"

    def progress(stage, done, total, message):
        state["stage"] = stage
        print(f"  {stage} {done}/{total} {message}: {resident_mb():.0f} MB now, stage peak "
              f"{state['peak'].get(stage, 0.0):.0f} MB", flush=True)

    build_proxy(BuildSpec(src=src, out=out, keep_ratio=0.25, device="cpu"), progress=progress)
    print("  peak by stage: " + ", ".join(f"{k} {v:.0f} MB" for k, v in state["peak"].items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--trace", action="store_true", help="also run one build with an RSS trace per progress event")
    ap.add_argument("--trace-run", nargs=2, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trace_run:
        trace_build(Path(args.trace_run[0]), Path(args.trace_run[1]))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="moeproxy-bench-"))
    try:
        src = tmp / "src"
        t = time.time()
        total = write_checkpoint(src, args.layers)
        layer_bytes = EXPERTS * 3 * HIDDEN * MOE_I * 2
        print(f"synthetic checkpoint: {total / 1e9:.2f} GB ({args.layers} layers x {EXPERTS} experts, "
              f"one layer's experts {layer_bytes / 1e6:.0f} MB), written in {time.time() - t:.1f} s")
        target_rss = 1.5 * layer_bytes + 600e6
        cp = [sys.executable, "-c", f"import shutil; shutil.copytree({str(src)!r}, {str(tmp / 'copy')!r})"]
        seconds_copy, rss_copy, _ = timed_child(cp)
        shutil.rmtree(tmp / "copy")
        print(f"plain copy:              {seconds_copy:7.2f} s   peak RSS {rss_copy / 1e6:7.0f} MB")
        moeproxy = shutil.which("moeproxy") or "moeproxy"
        for label, extra in (("build --no-verify", ["--no-verify"]), ("build (with verify)", [])):
            out = tmp / "proxy"
            cmd = [moeproxy, "build", str(src), str(out), "--method", "weights", "--keep-ratio", "0.25",
                   "--device", "cpu", *extra]
            seconds, rss, text = timed_child(cmd)
            report = json.loads((out / "proxy_report.json").read_text())
            shutil.rmtree(out)
            verify = report["verify"]
            vtxt = "skipped" if "skipped" in verify else (
                f"passed={verify['passed']} max|dlogit|={verify.get('max_abs_logit_diff', float('nan')):.2e} "
                f"(tolerance {verify.get('tolerance', float('nan')):.2e}); per layer max|dout|/tolerance "
                f"{verify.get('max_layer_diff_over_tolerance', float('nan')):.3f} over {len(verify.get('layers', []))} layers")
            print(f"{label:24} {seconds:7.2f} s   peak RSS {rss / 1e6:7.0f} MB   "
                  f"({seconds / seconds_copy:.2f}x copy; RSS target {target_rss / 1e6:.0f} MB: "
                  f"{'met' if rss < target_rss else 'MISSED'}; time target 3x: "
                  f"{'met' if seconds <= 3 * seconds_copy else 'MISSED'})")
            print(f"    report: cluster {report['seconds']['cluster']:.2f} s, write {report['seconds']['write']:.2f} s, "
                  f"verify {report['seconds'].get('verify', 0):.2f} s, total in-process {report['seconds']['total']:.2f} s; "
                  f"{report['bytes_after'] / 1e9:.2f} GB written; verify {vtxt}")
        if args.trace:
            print("RSS trace of one build (with verify), in a fresh process:")
            subprocess.run([sys.executable, __file__, "--trace-run", str(src), str(tmp / "traced")], check=True)
            shutil.rmtree(tmp / "traced")
        t = time.time()
        imp, rss_imp, _ = timed_child([sys.executable, "-c", "import torch, transformers, sklearn, safetensors"])
        print(f"baseline: importing torch+transformers+sklearn alone takes {imp:.2f} s, peak RSS {rss_imp / 1e6:.0f} MB")
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
