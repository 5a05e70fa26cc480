"""Have the experts specialised? A pretrained tiny MoE against a random one of the same shape.

For each MoE layer, on the same held-out arithmetic prompts:
- expert-load entropy: the entropy of the share of routed tokens each expert receives, over its
  maximum ln(E) (1.0: every expert equally loaded; low: a few experts take the tokens);
- mean router entropy per token (``RoutingProbe``), over ln(E): a sure router is low;
- the silhouette (scikit-learn) of the clustering ``moeproxy build`` makes of the layer's experts
  (the ``weights`` signatures, average-linkage agglomerative clustering into E' = E * ratio
  clusters): near 0 or below, the experts are interchangeable and which one is kept hardly matters;
  higher, the experts form groups and a representative per group stands for them.

    python bench/specialisation.py [--model DIR] [--ratio 0.25] [--prompts 512]

Prints one table row per layer and model, and the command; writes nothing.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path

from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT


def routing_stats(model, tokenizer, prompts: int, seed: int = 0) -> dict[int, tuple[float, float]]:
    """layer -> (expert-load entropy / ln E, mean per-token router entropy / ln E)."""
    import torch

    from moeproxy.repro import arithmetic
    from moeproxy.repro.probes import RoutingProbe
    from moeproxy.repro.sampling import encode_prompts

    rng = random.Random(seed)
    pairs = arithmetic.sample_prompts("eval", prompts, rng)
    texts = [arithmetic.prompt(a, b) + str(a + b) for a, b in pairs]
    ids, mask = encode_prompts(tokenizer, texts)
    probe = RoutingProbe(model)
    probe.set_token_mask(mask)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    collected = probe.collect()
    probe.remove()
    experts = model.config.num_experts
    out = {}
    for layer, share in collected["load"].items():
        h = -sum(p * math.log(p) for p in share if p > 0)
        out[layer] = (h / math.log(experts), collected["metrics"][f"routing_entropy/layer_{layer}"] / math.log(experts))
    return out


def silhouettes(checkpoint: Path, ratio: float, seed: int = 0) -> dict[int, float]:
    """layer -> silhouette of ``moeproxy build``'s clustering of the layer's experts (weights signatures)."""
    import numpy as np
    from sklearn.metrics import silhouette_score

    from moeproxy.proxy.arch import adapter_for
    from moeproxy.proxy.layout import find_layout
    from moeproxy.proxy.checkpoint import open_checkpoint
    from moeproxy.proxy.cluster import choose_kept_experts
    from moeproxy.proxy.features import FEATURE_METHODS, FeatureContext

    ckpt = open_checkpoint(checkpoint)
    adapter = adapter_for(ckpt.config, str(checkpoint / "config.json"))
    ctx = FeatureContext(ckpt, adapter, find_layout(ckpt, adapter), seed=seed)
    out = {}
    for layer, feats in FEATURE_METHODS["weights"](ctx):
        x = np.asarray(feats.features, dtype=np.float64)
        kept = max(2, round(x.shape[0] * ratio))
        labels = choose_kept_experts(x, kept).labels
        out[layer.layer] = float(silhouette_score(x, labels)) if len(set(labels)) > 1 else float("nan")
    return out


def main(argv=None) -> int:
    import torch

    from moeproxy.repro.tiny_moe import TinyMoeShape, build_tiny_moe, load_tiny_moe

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_CHECKPOINT), help="pretrained checkpoint (default: the bundled one)")
    parser.add_argument("--ratio", type=float, default=0.25, help="kept share of experts for the clustering (default 0.25)")
    parser.add_argument("--prompts", type=int, default=512)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    trained, tokenizer = load_tiny_moe(args.model)
    shape = TinyMoeShape.from_config(trained.config)
    random_model = build_tiny_moe(seed=1, shape=shape)
    print(f"shape {shape.key}; {args.prompts} held-out prompts; clustering into {args.ratio:g} of the experts\n")
    print("| model | layer | expert-load entropy / ln E | router entropy per token / ln E | silhouette |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        random_dir = Path(tmp) / "random"
        random_model.save_pretrained(random_dir)
        for name, model, path in (("pretrained", trained, Path(args.model)), ("random", random_model, random_dir)):
            stats = routing_stats(model.eval(), tokenizer, args.prompts)
            sil = silhouettes(path, args.ratio)
            for layer in sorted(stats):
                load_h, router_h = stats[layer]
                print(f"| {name} | {layer} | {load_h:.3f} | {router_h:.3f} | {sil.get(layer, float('nan')):.3f} |")
    print(f"\n{time.perf_counter() - started:.0f} s; command: python bench/specialisation.py {' '.join(sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
