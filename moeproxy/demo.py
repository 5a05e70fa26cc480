"""Load the bundled demo runs (``data/demo/``) into an empty store, diagnosed, so a new user sees a
full run, its proxy and a diagnosed failure in the dashboard's first minute.

Layout of a demo directory: ``manifest.json`` = ``{"runs": [{"name", "path", "role", "proxy_of"}]}``
with paths relative to the directory (runs are ingested in the listed order, so a full run comes
before its proxy). Without a manifest, every log file at the top level is one run named by its
stem; a name containing ``proxy`` is a proxy (of the only full run, when there is exactly one),
anything else is a full run. Each visible subdirectory (one scenario of ``moeproxy repro``, e.g.
``data/demo/overflow/{full,proxy}.jsonl``) follows the same rule with run names prefixed by the
directory name (``overflow-full``, ``overflow-proxy``); failing scenarios are loaded before
``healthy`` so the dashboard opens on a failure. ``load_demo`` does nothing on a store that
already has runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from moeproxy.errors import InputError, NotFound

DEMO_DIR = Path(__file__).resolve().parent.parent / "data" / "demo"
_LOG_SUFFIXES = {".jsonl", ".log", ".txt", ".csv", ".tsv"}


@dataclass
class DemoRun:
    name: str
    path: Path
    role: str = "full"
    proxy_of: str | None = None


@dataclass
class DemoResult:
    loaded: list[str] = field(default_factory=list)
    skipped_reason: str | None = None
    warnings: list[str] = field(default_factory=list)


def demo_runs(demo_dir: str | Path = DEMO_DIR) -> list[DemoRun]:
    """The runs a demo directory describes (manifest, else naming convention)."""
    demo_dir = Path(demo_dir)
    if not demo_dir.is_dir():
        raise NotFound(f"{demo_dir}: no demo directory")
    manifest = demo_dir / "manifest.json"
    if manifest.exists():
        try:
            entries = json.loads(manifest.read_text())["runs"]
            return [DemoRun(name=e["name"], path=demo_dir / e["path"], role=e.get("role", "full"),
                            proxy_of=e.get("proxy_of")) for e in entries]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(f"{manifest}: expected {{\"runs\": [{{\"name\", \"path\", ...}}]}} ({exc})") from None
    runs = _runs_in(demo_dir, prefix="")
    scenarios = sorted((d for d in demo_dir.iterdir() if d.is_dir() and not d.name.startswith((".", "_"))),
                       key=lambda d: (d.name == "healthy", d.name))
    for scenario in scenarios:
        runs += _runs_in(scenario, prefix=f"{scenario.name}-")
    return runs


def _runs_in(directory: Path, prefix: str) -> list[DemoRun]:
    """The log files directly in ``directory`` as runs, full runs first."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in _LOG_SUFFIXES
                   and p.name != "manifest.json")
    runs = [DemoRun(name=prefix + p.stem, path=p, role="proxy" if "proxy" in p.stem.lower() else "full")
            for p in files]
    fulls = [r.name for r in runs if r.role == "full"]
    for r in runs:
        if r.role == "proxy" and len(fulls) == 1:
            r.proxy_of = fulls[0]
    runs.sort(key=lambda r: r.role == "proxy")
    return runs


def load_demo(store, demo_dir: str | Path = DEMO_DIR) -> DemoResult:
    """Ingest and diagnose the demo runs into ``store`` if it has no runs yet (a run whose diagnosis
    fails is still loaded, with a warning in the result)."""
    from moeproxy.diagnose.record import diagnose_and_record_all
    from moeproxy.ingest import ingest_paths

    if not store.runs().empty:
        return DemoResult(skipped_reason="the store already has runs")
    if not Path(demo_dir).is_dir():
        return DemoResult(skipped_reason=f"no demo data at {demo_dir}")
    result = DemoResult()
    runs = demo_runs(demo_dir)
    if not runs:
        return DemoResult(skipped_reason=f"no run logs in {demo_dir}")
    for run in runs:
        ingest_paths(store, [run.path], run=run.name, role=run.role, proxy_of=run.proxy_of)
        result.loaded.append(run.name)
    # a detector bug must not keep the demo runs out of the dashboard: named, not raised
    failures = diagnose_and_record_all(store, result.loaded)
    result.warnings += [f"{name}: not diagnosed ({why})" for name, why in failures.items()]
    return result
