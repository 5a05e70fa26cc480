"""Score moeproxy's diagnosis on labelled real public training logs (fields: shared/real-logs/README.md).

    python bench/real_logs.py [DIR ...] [--cv] [--write-model FILE] [--model FILE]

With no DIR, every labelled set under tests/fixtures/real/ is scored. Each file is diagnosed as
`moeproxy diagnose FILE` does; a verdict counts when either rater gave it
(``moeproxy.diagnose.evaluation``). ``--cv`` adds leave-one-source-out cross-validation of the two
ways of choosing the root cause (LABELS.md's causal order, and a logistic regression over the
findings; ``moeproxy.diagnose.verdict_model``) over every log scored; ``--write-model`` writes the
learned model fitted on all of them as JSON; ``--model FILE`` scores the DIRs' logs by such a model
too, beside the causal order (a fresh set that neither the rules nor the model were made on).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"


def labelled_sets() -> list[Path]:
    return sorted({p.parent for p in REAL.glob("*/labels*.json")})


def main(argv=None) -> int:
    from moeproxy.diagnose.evaluation import evaluate, render_cases, score

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--cv", action="store_true", help="leave-one-source-out cross-validation of both verdicts")
    ap.add_argument("--write-model", type=Path, help="write the learned verdict fitted on every log")
    ap.add_argument("--model", type=Path, help="also score the logs by the learned verdict of FILE (from "
                    "--write-model on other logs): the two ways of choosing compared on a set neither saw")
    args = ap.parse_args(argv)
    folders = args.folders or labelled_sets()
    history = REAL / "first_sight.json"
    if history.is_file() and not args.folders:
        import json

        print("== first-sight scores of the blind sets (scored once, before anyone looked at moeproxy's output)")
        for row in json.loads(history.read_text()):
            print(f"  {row['set']:<10} {row['date']}  {row['logs']:>3} logs  verdicts {row['verdicts']}  "
                  f"onsets {row['onsets']}  failures found {row['failures_found']}  ({row['commit']})")
    every = []
    for folder in folders:
        cases = evaluate(folder)
        print(render_cases(f"real logs in {folder}", cases))
        every += cases
    print(f"\n== all {len(every)} logs: {score(every).line()}; {len({c.source for c in every})} sources; "
          f"tracebacks {sum(bool(c.error and c.error.startswith('TRACEBACK')) for c in every)}; "
          f"slowest {max((c.seconds for c in every), default=0):.2f} s")
    from moeproxy.diagnose.evaluation import case_calibration, first_sight_calibration, render_calibration

    print(render_calibration("right by confidence, these logs now", case_calibration(every)))
    kept = sorted(REAL.glob("*/first_sight_output.txt"))
    if kept and not args.folders:
        print(render_calibration(f"right by confidence at first sight ({len(kept)} blind sets whose output "
                                 f"was kept)", first_sight_calibration(kept)))
    disagree = [c for c in every if c.raters_disagree]
    if disagree:
        loud = [c.file for c in disagree if c.confidence == "high"]
        print(f"raters disagree on {len(disagree)} logs; the tool is sure (high) on {len(loud)} of them"
              + (f": {', '.join(loud)}" if loud else ""))
    if args.cv or args.write_model:
        from moeproxy.diagnose.verdict_model import cross_validate, fit

        cv = cross_validate(every)
        print("\n== leave-one-source-out cross-validation (no repository both in training and test)")
        for method, o in cv.items():
            print(f"{method:>8}: verdicts {o['right']}/{o['n']} ({100 * o['right'] / max(o['n'], 1):.1f} %), "
                  f"onsets in range {o['onsets']}/{o['judged']}")
        if args.write_model:
            args.write_model.write_text(fit(every).to_json())
            print(f"wrote {args.write_model}")
    if args.model:
        from moeproxy.diagnose.verdict_model import LearnedVerdict, held_out

        print(f"\n== the causal order and the learned verdict of {args.model} on these {len(every)} logs")
        for method, o in held_out(every, LearnedVerdict.from_json(args.model.read_text())).items():
            print(f"{method:>8}: verdicts {o['right']}/{o['n']} ({100 * o['right'] / max(o['n'], 1):.1f} %), "
                  f"onsets in range {o['onsets']}/{o['judged']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
