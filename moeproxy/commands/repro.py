"""``moeproxy repro``: pre-train the tiny MoE, run one GRPO scenario, or a full-vs-proxy pair."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from moeproxy.commands.common import add_db_option
from moeproxy.repro.harness import BASELINES

HELP = "Reproduction harness: pretrain the tiny MoE, run GRPO fault scenarios on a model and its proxy."


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"keep ratio must be in (0, 1], got {value}")
    return value


def add_shape_options(p: argparse.ArgumentParser) -> None:
    """The model shape options (``TinyMoeShape.from_options``); unset ones keep the bundled model's."""
    g = p.add_argument_group("model shape (default: the bundled tiny MoE's)")
    g.add_argument("--hidden-size", type=_positive_int, default=None, help="hidden size (default 64)")
    g.add_argument("--moe-intermediate-size", type=_positive_int, default=None, help="each expert's MLP width (default 32)")
    g.add_argument("--layers", type=_positive_int, default=None, help="decoder layers (default 3)")
    g.add_argument("--experts", type=_positive_int, default=None, help="experts per MoE layer (default 32)")
    g.add_argument("--top-k", type=_positive_int, default=None, help="experts each token is routed to (default 4)")
    g.add_argument("--heads", type=_positive_int, default=None, help="attention heads (default 4)")


SHAPE_OPTIONS = ("hidden_size", "moe_intermediate_size", "layers", "experts", "top_k", "heads")


def shape_of(args: argparse.Namespace):
    """The ``TinyMoeShape`` the options ask for, or None when none is given."""
    from moeproxy.errors import InputError
    from moeproxy.repro.tiny_moe import TinyMoeShape

    given = {k: getattr(args, k, None) for k in SHAPE_OPTIONS}
    if all(v is None for v in given.values()):
        return None
    try:
        return TinyMoeShape.from_options(**given)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="repro_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("pretrain", help="supervised warm-up of the tiny MoE (fixed seed, CPU minutes)")
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("--steps", type=_positive_int, default=1500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=_positive_int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    add_shape_options(p)

    p = sub.add_parser("grpo", help="run one GRPO scenario on one checkpoint, writing verl file JSONL")
    p.add_argument("--model", default=None, help="checkpoint directory (default: data/tiny-moe)")
    p.add_argument("--scenario", default="healthy")
    p.add_argument("--steps", type=_positive_int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", required=True, help="JSONL file to write")

    p = sub.add_parser("run", help="build a proxy, run the scenario on full and proxy, ingest, compare")
    p.add_argument("--scenario", required=True, help="healthy, overflow, divergence, precision_mismatch, "
                   "routing_collapse or routing_mismatch (see moeproxy.repro.scenarios)")
    p.add_argument("--keep-ratio", type=_ratio, default=0.25, help="fraction of experts kept per MoE layer (default 0.25)")
    p.add_argument("--steps", type=_positive_int, default=60, help="GRPO steps of each run (default 60)")
    p.add_argument("--out", required=True, help="output directory (proxy checkpoint, logs, fidelity.json)")
    p.add_argument("--seed", type=int, default=0, help="seed of prompts, sampling and the proxy build (default 0)")
    p.add_argument("--model", default=None, help="full checkpoint (default: data/tiny-moe)")
    add_db_option(p)
    p.add_argument("--name", default=None, help="run name prefix (default: repro-<scenario>-s<seed>)")
    p.add_argument("--baseline", choices=list(BASELINES), default="cluster",
                   help="proxy kind: clustering (moeproxy build, default), random experts, a dense model, or "
                        "a replica (the full model with another sampling seed: the noise ceiling)")
    p.add_argument("--heal-steps", type=int, default=100,
                   help="supervised steps on the proxy after pruning, before RL (default 100)")
    p.add_argument("--no-evaluate", action="store_true", help="skip the keep/reject evaluation of the proxy")
    p.add_argument("--pretrain-steps", type=_positive_int, default=1500,
                   help="with shape options: supervised steps of the full model pretrained for them (default 1500)")
    add_shape_options(p)
    _add_demo(sub)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="regenerate the bundled demo runs (full + proxy per scenario)")
    p.add_argument("--out", default="data/demo", help="demo directory (default data/demo)")
    p.add_argument("--steps", type=_positive_int, default=40)
    p.add_argument("--keep-ratio", type=_ratio, default=0.25)
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    if args.repro_command == "pretrain":
        from moeproxy.repro.pretrain import PretrainConfig, pretrain

        from moeproxy.repro.tiny_moe import TinyMoeShape

        pretrain(PretrainConfig(seed=args.seed, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                shape=shape_of(args) or TinyMoeShape()), args.out)
        return 0
    if args.repro_command == "grpo":
        from moeproxy.outputs import check_target
        from moeproxy.repro.grpo import run_grpo
        from moeproxy.repro.scenarios import get_scenario
        from moeproxy.repro.tiny_moe import load_tiny_moe

        check_target(args.log, "log")  # a directory, device or FIFO fails before training, not after
        scenario = get_scenario(args.scenario)
        model, tokenizer = load_tiny_moe(args.model)
        summary = run_grpo(model, tokenizer, scenario.config(args.steps, args.seed), args.log)
        print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
        return 0
    if args.repro_command == "demo":
        from moeproxy.repro.harness import write_demo

        write_demo(Path(args.out), steps=args.steps, keep_ratio=args.keep_ratio, seed=args.seed)
        print(f"wrote {Path(args.out) / 'manifest.json'}")
        return 0
    from moeproxy.repro.harness import HarnessSpec, run_pair

    spec = HarnessSpec(scenario=args.scenario, keep_ratio=args.keep_ratio, steps=args.steps, seed=args.seed,
                       out=Path(args.out), model=args.model, db=args.db, name=args.name, baseline=args.baseline,
                       heal_steps=args.heal_steps, evaluate=not args.no_evaluate, shape=shape_of(args),
                       pretrain_steps=args.pretrain_steps)
    result = run_pair(spec, log=print)
    full, proxy = result["full"], result["proxy"]
    print(f"full  {full['verdict']:<20} onset {full['onset_step']}")
    print(f"proxy {proxy['verdict']:<20} onset {proxy['onset_step']}")
    print(f"verdict match: {result['verdict_match']}; onset relative difference: {result['onset_relative_difference']}")
    print(f"wrote {Path(args.out) / 'fidelity.json'}")
    return 0
