"""Diagnose runs where they live, and record what was found: the one call every caller uses.

``diagnose_and_record(store, run)`` reads a stored run as every reader does (``Store.run_frame``),
diagnoses it and saves the findings with ``DETECTOR_VERSION``; with ``only_if_stale`` it returns the
stored findings instead when they come from this detector version. ``diagnose_and_record_all`` does
it for the runs an ingest just filled, naming each run whose diagnosis failed (the data stays in).
``diagnose_target`` is what ``moeproxy diagnose TARGET`` does: a stored run is diagnosed and
recorded; a log file or directory is ingested into a scratch in-memory store and diagnosed there,
nothing written to the user's database. ``ingest_and_diagnose`` is an ingest followed by the
diagnosis of every run it filled (``moeproxy ingest --diagnose``, the Runs page's upload, the demo).
The watcher diagnoses in batches inside its own write transaction: ``diagnose_frames`` then
``record_in``, the same two steps ``diagnose_and_record`` takes. The fidelity comparison reads the
recorded findings (``current_findings``) instead of diagnosing again. Callers: the CLI, the Runs and
Triage pages, the demo loader, the repro harness, the watcher, the fidelity comparison.
"""

from __future__ import annotations

from pathlib import Path

from moeproxy.errors import MoeproxyError, NotFound


def _detector_version() -> str:
    from moeproxy.diagnose import DETECTOR_VERSION

    return DETECTOR_VERSION


def findings_are_stale(findings: dict | None) -> bool:
    """True when a run has no recorded findings or they come from another detector version."""
    return findings is None or findings.get("detector_version") != _detector_version()


def diagnose_and_record(store, run: str, *, only_if_stale: bool = False) -> dict:
    """The findings of stored ``run``: diagnosed now and saved with the detector version (with
    ``only_if_stale``, the stored ones when they are from this detector version)."""
    from moeproxy.diagnose.diagnosis import diagnose_frame

    if only_if_stale:
        stored = store.findings(run)
        if not findings_are_stale(stored):
            return stored
    result = diagnose_frame(store.run_frame(run))
    store.save_findings(run, result, _detector_version())
    return result


def current_findings(store, run: str) -> dict:
    """The recorded findings of stored ``run`` when they come from this detector version, else
    diagnosed now and recorded: what a reader of a run's diagnosis (the fidelity comparison, a
    report) uses, so that every page shows the one recorded answer."""
    return diagnose_and_record(store, run, only_if_stale=True)


def diagnose_frames(frames: dict) -> dict[str, dict | Exception]:
    """run -> its diagnosis, or the exception its diagnosis raised (a detector's bug must not stop
    the caller: the watcher keeps ingesting and tries again when the run grows)."""
    from moeproxy.diagnose.diagnosis import diagnose_frame

    out: dict[str, dict | Exception] = {}
    for run, frame in frames.items():
        try:
            out[run] = diagnose_frame(frame)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller, who reports it
            out[run] = exc
    return out


def record_in(tx, run_id: int, result: dict) -> None:
    """Save ``result`` for a run inside the caller's open write transaction, with the detector
    version (the batch form of ``diagnose_and_record``'s save)."""
    tx.add_findings(run_id, result, _detector_version())


def ingest_and_diagnose(store, paths, **options):
    """Ingest ``paths`` (``moeproxy.ingest.ingest_paths``' options), then diagnose and record every
    run that received new data. Returns (the ingest summaries, run -> its result or why it was not
    diagnosed); the data stays in when a diagnosis fails (it can be run again later)."""
    from moeproxy.ingest import ingest_paths

    summaries = ingest_paths(store, paths, **options)
    target = store() if callable(store) else store
    runs = sorted({s.run for s in summaries if not s.duplicate})
    return summaries, diagnose_and_record_each(target, runs)


def diagnose_and_record_each(store, runs) -> dict[str, dict | str]:
    """``diagnose_and_record`` each run: run -> its result, or why it was not diagnosed (a string;
    a detector bug must not keep ingested data out: it can be diagnosed again later)."""
    out: dict[str, dict | str] = {}
    for run in runs:
        try:
            out[run] = diagnose_and_record(store, run)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who shows it
            out[run] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def diagnose_and_record_all(store, runs) -> dict[str, str]:
    """``diagnose_and_record`` each run; returns run -> why it was not diagnosed, for those that
    failed."""
    return {run: why for run, why in diagnose_and_record_each(store, runs).items() if isinstance(why, str)}


def _store_with_run(target: str, db: str | None):
    """The store at ``db`` (else the default database) when it holds a run named ``target``."""
    from moeproxy.store import Store, resolve_db, store_exists

    db_path = resolve_db(db)
    if store_exists(db_path):
        try:
            store = Store(db_path)
            if store.has_run(target):
                return store, db_path
        except MoeproxyError:
            # a log path needs no database: a default one it cannot open (a newer DuckDB's) is no reason
            # to stop; a database named with --db that is not one is said
            if db is not None or not Path(target).exists():
                raise
    return None, db_path


def load_runs(target: str, db: str | None):
    """(first run name, {run name: long frame}, the store or None) for a stored run or a log path
    (a log path is ingested into a scratch in-memory store; a file may hold several runs)."""
    from moeproxy.store import Store, store_exists

    store, db_path = _store_with_run(target, db)
    if store is not None:
        return target, {target: store.run_frame(target)}, store
    path = Path(target)
    if not path.exists():
        where = f"the database {db_path}" if store_exists(db_path) else f"a database (none at {db_path})"
        raise NotFound(f"{target}: no run of that name in {where}, and no such file or directory")
    from moeproxy.ingest import ingest_paths

    scratch = Store(":memory:")
    name = path.resolve().name
    runs = list(dict.fromkeys(s.run for s in ingest_paths(scratch, [path], run=name)))
    return runs[0], {run: scratch.run_frame(run) for run in runs}, None


def load_target(target: str, db: str | None):
    """(run name, long frame, the store holding it or None): ``load_runs``' first run."""
    name, frames, store = load_runs(target, db)
    return name, frames[name], store


def worst_of(results: dict[str, dict]) -> tuple[str, dict]:
    """The run whose failure starts first (else the first run), with every run's verdict in
    ``runs`` when there are several."""
    failed = [(r["onset_step"] if r["onset_step"] is not None else 1 << 62, name)
              for name, r in results.items() if r["verdict"] != "healthy"]
    name = min(failed)[1] if failed else next(iter(results))
    result = dict(results[name])
    if len(results) > 1:
        result["run"] = name
        result["runs"] = {n: {"verdict": r["verdict"], "onset_step": r["onset_step"],
                              "confidence": r.get("confidence")} for n, r in results.items()}
    return name, result


def diagnose_target(target: str, db: str | None, reference: str | None = None) -> tuple[str, dict, bool]:
    """(run name, result, recorded?) for a stored run or a log path; a stored run's result is
    recorded (not when compared with a reference: that result is about the pair)."""
    from moeproxy.diagnose.diagnosis import diagnose_frame
    from moeproxy.diagnose.pair import diagnose_pair

    if reference is None:
        store, _ = _store_with_run(target, db)
        if store is not None:
            from moeproxy.errors import StoreReadOnly

            try:
                return target, diagnose_and_record(store, target), True
            except StoreReadOnly:  # a dashboard's read-only role: the diagnosis, not recorded
                return target, diagnose_frame(store.run_frame(target)), False
    name, frames, _ = load_runs(target, db)
    if reference is not None:
        ref_name, ref_frame, _ = load_target(reference, db)
        return name, diagnose_pair(frames[name], ref_frame, label=name, reference_label=ref_name), False
    return (*worst_of({run: diagnose_frame(frame) for run, frame in frames.items()}), False)
