"""Evaluate moeproxy.diagnose on the labelled evaluation set and print the full confusion matrix,
per-category precision/recall, onset errors (share of each run's step range) and timing.

    python bench/diagnose_eval.py [--seed 7] [--per-kind 6] [--formats] [--real] [--long 100000]

``--real`` also scores every labelled real public log (bench/real_logs.py): each set, the
first-sight history of the blind sets, and leave-one-source-out cross-validation.

``--formats`` also writes every run in its real framework formats, ingests each file into an
in-memory store and diagnoses the stored run (the path `moeproxy diagnose FILE` takes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "diagnose"))

from evalset import formats_for, generate_eval_set, generate_pairs, render  # noqa: E402

from moeproxy.diagnose import CATEGORIES, diagnose_frame, diagnose_pair  # noqa: E402

TOLERANCE = 0.05


def evaluate(cases):
    """cases: (name, label, onset, span, verdict, got_onset)."""
    confusion = Counter((c[1], c[4]) for c in cases)
    correct, errors, wrong = 0, [], []
    for name, label, onset, span, verdict, got in cases:
        ok = verdict == label
        if ok and onset is not None:
            err = abs(got - onset) / span
            errors.append(err)
            ok = err <= TOLERANCE
        correct += ok
        if not ok:
            wrong.append((name, label, onset, verdict, got))
    return confusion, correct, errors, wrong


def print_report(title, cases, seconds):
    confusion, correct, errors, wrong = evaluate(cases)
    labels = [c for c in CATEGORIES if any(k[0] == c or k[1] == c for k in confusion)]
    short = {c: c[:10] for c in labels}
    print(f"\n== {title}: {len(cases)} runs, accuracy (verdict and onset within {TOLERANCE:.0%}) "
          f"{correct}/{len(cases)} = {correct / len(cases):.3f}; {1000 * seconds / len(cases):.1f} ms per run")
    print("confusion matrix (rows = label, columns = verdict)")
    print(" " * 20 + "".join(f"{short[c]:>11}" for c in labels))
    for r in labels:
        print(f"{r:<20}" + "".join(f"{confusion.get((r, c), 0):>11}" for c in labels))
    print("per category:           precision   recall  support")
    for c in labels:
        tp = confusion.get((c, c), 0)
        pred = sum(v for (a, b), v in confusion.items() if b == c)
        sup = sum(v for (a, b), v in confusion.items() if a == c)
        p = f"{tp / pred:.3f}" if pred else "  -  "
        rc = f"{tp / sup:.3f}" if sup else "  -  "
        print(f"  {c:<22}{p:>9}{rc:>9}{sup:>9}")
    if errors:
        errors.sort()
        q = lambda x: errors[min(len(errors) - 1, int(x * len(errors)))]  # noqa: E731
        print(f"onset error (share of step range) over {len(errors)} correctly classified failures: "
              f"median {q(0.5):.4f}, p90 {q(0.9):.4f}, max {errors[-1]:.4f}, "
              f"within 5%: {sum(e <= TOLERANCE for e in errors)}/{len(errors)}")
    for w in wrong:
        print("  wrong:", json.dumps(w))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--per-kind", type=int, default=6)
    ap.add_argument("--formats", action="store_true")
    ap.add_argument("--real", action="store_true",
                    help="also score the real public logs of tests/fixtures/real (shared set, collected set, halves)")
    ap.add_argument("--long", type=int, default=0, metavar="STEPS",
                    help="also time one run of STEPS records x 6 metrics with a blow-up at 70%%")
    args = ap.parse_args(argv)
    runs = generate_eval_set(seed=args.seed, per_kind=args.per_kind)
    t0 = time.perf_counter()
    cases = []
    for r in runs:
        res = diagnose_frame(r.frame())
        cases.append((r.name, r.label, r.onset, r.span, res["verdict"], res["onset_step"]))
    print_report(f"generated set (seed {args.seed})", cases, time.perf_counter() - t0)
    t0, cases = time.perf_counter(), []
    for p in generate_pairs(seed=args.seed, per_kind=4):
        res = diagnose_pair(p.run.frame(), p.reference.frame())
        cases.append((p.name, p.label, p.onset, p.span, res["verdict"], res["onset_step"]))
    print_report("pairs of runs that should match", cases, time.perf_counter() - t0)
    if args.formats:
        from moeproxy.ingest import ingest_paths
        from moeproxy.store import Store

        cases, t0 = [], time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            for r in runs:
                for fmt in formats_for(r):
                    name, text = render(r, fmt)
                    path = Path(tmp) / f"{r.name}-{fmt}" / name
                    path.parent.mkdir()
                    path.write_text(text)
                    store = Store(":memory:")
                    ingest_paths(store, [path], run="run")
                    res = diagnose_frame(store.run_frame("run"))
                    cases.append((f"{r.name}/{fmt}", r.label, r.onset, r.span, res["verdict"], res["onset_step"]))
        print_report("same runs written in framework formats, ingested, diagnosed", cases, time.perf_counter() - t0)
    if args.real:
        sys.path.insert(0, str(ROOT / "bench"))
        from real_logs import main as real_logs_main

        real_logs_main(["--cv"])  # every labelled set, first-sight history, cross-validation
    if args.long:
        time_long_run(args.long)
    return 0


def time_long_run(n: int) -> None:
    import numpy as np
    import pandas as pd

    from moeproxy.diagnose import diagnose_series

    rng = np.random.default_rng(0)
    steps = np.arange(1, n + 1)
    grad = np.exp(rng.normal(0, 0.2, n))
    i0 = int(0.7 * n)
    grad[i0:] *= np.exp(np.linspace(0, 10, n - i0))
    series = {
        "grad_norm": grad, "loss": 2 + 0.01 * rng.normal(size=n), "reward_mean": 0.5 + 0.02 * rng.normal(size=n),
        "policy_entropy": 0.5 * np.exp(rng.normal(0, 0.03, n)), "kl": 0.01 * np.exp(rng.normal(0, 0.2, n)),
        "logprob_diff_mean": 0.002 * np.exp(rng.normal(0, 0.1, n)),
    }
    t0 = time.perf_counter()
    res = diagnose_series({k: pd.Series(v, index=steps) for k, v in series.items()})
    seconds = time.perf_counter() - t0
    print(f"\n== long run: {n} steps x {len(series)} metrics diagnosed in {seconds:.2f} s; verdict "
          f"{res['verdict']} from step {res['onset_step']} (blow-up injected at step {i0 + 1}, onset error "
          f"{abs(res['onset_step'] - (i0 + 1)) / (n - 1):.4f} of the range)")


if __name__ == "__main__":
    sys.exit(main())
