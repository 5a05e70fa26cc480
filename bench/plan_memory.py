"""The planner's activation estimate against what one forward and backward measures here.

`moeproxy plan --micro-batch-tokens N` counts the activations autograd keeps for one micro-batch
(``moeproxy.proxy.plan.activation_bytes``). This script builds that micro-batch (``--sequences`` of
``--seq-len`` tokens) for a checkpoint, runs one forward and backward on one CPU thread, and prints
the resident peak above the size before the forward, less the gradients (4 bytes a parameter),
beside the planner's figure: three repetitions, so first-time allocations show apart.

    python bench/plan_memory.py bench/out/fidelity50m/full-h256-i256-l4-e64-k4-a4 --sequences 64 --seq-len 11
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a tiny-MoE checkpoint directory (moeproxy repro pretrain's)")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from moeproxy.proxy.checkpoint import load_config
    from moeproxy.proxy.plan import plan_proxy
    from moeproxy.repro.memory import reset_peak_rss, rss_kib
    from moeproxy.repro.tiny_moe import load_tiny_moe

    torch.set_num_threads(1)
    model, _ = load_tiny_moe(args.model)
    model = model.float()
    tokens = args.sequences * args.seq_len
    planned = plan_proxy(load_config(args.model), keep_ratio=1.0, micro_batch_tokens=tokens, seq_len=args.seq_len,
                         trainer="float32")["full"]["activation_bytes"]
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (args.sequences, args.seq_len), generator=torch.Generator().manual_seed(0))
    grads = sum(p.numel() * 4 for p in model.parameters())
    print(f"{args.model}: {sum(p.numel() for p in model.parameters()):,} parameters, {tokens:,} tokens "
          f"({args.sequences} x {args.seq_len})")
    print("repeat | measured MiB (peak above start, less gradients) | planned MiB | planned / measured")
    for rep in range(args.repeats):
        model.zero_grad(set_to_none=True)
        if not reset_peak_rss():
            raise SystemExit("this kernel does not let the resident peak be reset (/proc/self/clear_refs)")
        base = rss_kib("VmRSS")
        out = model(input_ids=ids, output_router_logits=True)
        loss = torch.log_softmax(out.logits.float(), -1).mean()
        if getattr(out, "aux_loss", None) is not None:
            loss = loss + 0.01 * out.aux_loss
        loss.backward()
        measured = (rss_kib("VmHWM") - base) * 1024 - grads
        print(f"{rep} | {measured / 2**20:.1f} | {planned / 2**20:.1f} | {planned / measured:.2f}")
        del out, loss


if __name__ == "__main__":
    main()
