"""`moeproxy build`: write a proxy checkpoint by clustering-based expert pruning (streaming, bounded memory)."""

from __future__ import annotations

import json
import signal

from moeproxy.commands.common import add_keep_options
from moeproxy.devices import DEVICE_CHOICES

HELP = "Build a proxy checkpoint: cluster each MoE layer's experts, keep one per cluster, copy the backbone."


def add_arguments(parser) -> None:
    parser.add_argument("src", help="source checkpoint directory (safetensors)")
    parser.add_argument("out", help="output directory (must not exist; written atomically)")
    add_keep_options(parser, required=True)
    parser.add_argument("--method", choices=["weights", "activations"], default="weights",
                        help="expert signatures: from weights (router rows + probe responses) or calibration activations")
    parser.add_argument("--calibration", help="JSONL calibration data for --method activations "
                        '({"input_ids": [...]} or {"text": ...} per line)')
    parser.add_argument("--max-calibration-tokens", type=int, default=4096, help="calibration token cap (default 4096)")
    parser.add_argument("--select", choices=["medoid", "frequency"], default="medoid",
                        help="cluster representative: medoid (default) or most frequently routed (needs activations)")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto",
                        help="device for calibration and verification (auto: npu, then cuda, then cpu)")
    parser.add_argument("--seed", type=int, default=0, help="seed for probe inputs and verification tokens")
    parser.add_argument("--no-verify", action="store_true", help="skip loading and comparing the written proxy")
    parser.add_argument("--json", action="store_true", help="print the proxy report as JSON")


def run(args) -> int:
    from pydantic import ValidationError
    from tqdm import tqdm

    from moeproxy.errors import InputError
    from moeproxy.proxy.build import BuildSpec, build_proxy
    from moeproxy.proxy.proxy_report import ProxyReport

    try:
        spec = BuildSpec(src=args.src, out=args.out, keep_ratio=args.keep_ratio, keep_experts=args.keep_experts,
                         method=args.method, calibration=args.calibration, select=args.select, top_k=args.top_k,
                         device=args.device, seed=args.seed, ep_size=args.ep_size, verify=not args.no_verify,
                         max_calibration_tokens=args.max_calibration_tokens)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"{'.'.join(map(str, err['loc'])) or 'options'}: {err['msg']}") from None
    bars = {}

    def progress(stage, done, total, message):
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, unit="layer" if stage == "cluster" else "step")
        bar.n = done
        bar.set_postfix_str(message, refresh=True)
        if done >= total:
            bar.close()

    def on_sigterm(signum, frame):  # like Ctrl-C: the partial folder is removed, exit 130
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        report = build_proxy(spec, progress=progress)
    except OSError as exc:  # disk full, permission denied mid-build: one line, the partial folder is gone
        where = f": {exc.filename}" if exc.filename else ""
        raise InputError(f"{exc.strerror or exc}{where}") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(report, indent=2))
    report = ProxyReport.model_validate(report)
    verify = report.verify
    if not args.json:
        print(f"wrote {report.output}: {report.family}, experts {report.experts_before} -> "
              f"{report.experts_after}, top-k {report.top_k_before} -> {report.top_k_after}, "
              f"{_size(report.bytes_after, report.bytes_before)}, {report.seconds['total']:.1f} s")
        for note in report.notes:
            print(f"note: {note}")
        if report.verify_passed is None:
            print("verification skipped")
        else:
            print("verification: " + ("passed" if report.verify_passed else f"FAILED {verify.get('error', '')}")
                  + (f" (max |logit diff| {verify['max_abs_logit_diff']:.2e})" if verify.get("forward_checked") else ""))
    return 0 if report.verify_passed is not False else 1


def _size(after: int, before: int) -> str:
    """``812 MiB of 2.59 GiB`` (``moeproxy.units``: a tiny checkpoint reads in KiB, not "0.00 GiB")."""
    from moeproxy.units import human_bytes

    return f"{human_bytes(after)} of {human_bytes(before)}"
