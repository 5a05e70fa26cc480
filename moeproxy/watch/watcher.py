"""The watcher: follows the log files of running jobs, stores what they append, re-diagnoses the
runs that grew, and raises an alert at a run's first critical finding.

One cycle (every ``interval`` seconds): scan the watched paths (new files, rotated ones), read each
followed file's new complete bytes (``follow.FollowedFile``), store them in one short transaction
together with each file's new position, diagnose the runs that grew, then record and emit each
alert when a run's diagnosis first names a failure, or an update of that alert when a later
diagnosis explains it better (``alerts.next_alert``: one alert per failure).

Concurrency: DuckDB lets one process at a time open the database file read-write, and while it
does no other process can open it at all, not even read-only (a second open fails on the file
lock; ``Store`` retries with back-off). So the watcher holds no connection between cycles: each
cycle reads and parses the files first, then opens the database once (``Store.held``), writes all
chunks in one transaction of a few statements, reads the series it will diagnose, and closes it
(about 0.2 s at 20 runs x 10,000 rows/s; diagnosis and alerts happen with the file closed, their
findings written in a second short transaction). The dashboard, ``moeproxy runs`` or ``moeproxy
ingest`` open it in between. When another process holds
the file for longer than the store's lock timeout the cycle's bytes stay unread, and the next
cycle tries again: nothing is skipped.

Restart safety: the position reached in each file is written in the transaction that stores its
rows, and alerts are recorded before they are emitted; a watcher killed at any point and started
again takes up each file where its last commit left it (when the bytes up to there are unchanged:
their sha256 is checked) and raises no alert twice.

When a run is diagnosed: as soon as new rows hold a non-finite value, or a value outside the range
its metric had so far by more than that range (a first overflow, spike, loss-scale drop or skipped
step), else at most every ``diagnose_every`` seconds (slow trends); and once at start.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import stat
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
from moeproxy.columns import Columns

from moeproxy.contracts import ROLES
from moeproxy.errors import InputError, StoreBusy, StoreUnavailable, WriteConflict
from moeproxy.ingest import default_run_name, rows_to_store
from moeproxy.terminal import shown
from moeproxy.watch.alerts import AlertSink, next_alert
from moeproxy.watch.claims import Claims
from moeproxy.watch.follow import Chunk, FileGone, FollowedFile, FollowError, OpenFiles
from moeproxy.watch.outputs import OwnFiles, check_alerts_path
from moeproxy.watch.webhook import redact_url

COMMIT_ATTEMPTS = 5  # a DuckLake catalog's commit lost to another writer's: written again at once, this many times


@dataclass
class WatchConfig:
    """What ``moeproxy watch`` follows and how; validated when made."""

    paths: list[str]
    run: str | None = None
    role: str = "other"
    proxy_of: str | None = None
    alerts: str | None = None
    webhook: str | None = None
    interval: float = 1.0
    diagnose_every: float = 10.0
    max_chunk_bytes: int = 16 << 20
    max_open_files: int = 64  # followed files holding a descriptor at once (a quarter of RLIMIT_NOFILE at most)
    # a DuckLake catalog's upkeep (``Store.compact``): inlined rows written out, small files merged
    compact_minutes: float = 10.0
    # a DuckLake catalog: new rows that hold nothing urgent are committed at most every this many
    # seconds (each commit is a catalog snapshot, ~0.1 s of a core); urgent ones at once. None: 3 s
    # on a catalog, 0 (every cycle) on a file store
    commit_every: float | None = None

    def __post_init__(self) -> None:
        if not self.paths:
            raise InputError("watch needs at least one PATH (a log file or a run directory)")
        if self.role not in ROLES:
            raise InputError(f"--role must be one of {', '.join(ROLES)}, not {self.role!r}")
        if not 0 < self.interval <= 3600:
            raise InputError(f"--interval must be more than 0 and at most 3600 seconds, not {self.interval:g}")
        if not 0 <= self.diagnose_every <= 86400:
            raise InputError(f"diagnose_every must be between 0 and 86400 seconds, not {self.diagnose_every:g}")
        if self.webhook is not None and not self.webhook.startswith(("http://", "https://")):
            raise InputError(f"--webhook {redact_url(self.webhook)}: an http:// or https:// URL")
        if not 0 < self.compact_minutes <= 10080:
            raise InputError(f"compact_minutes must be more than 0 and at most 10080, not {self.compact_minutes:g}")
        if self.commit_every is not None and not 0 <= self.commit_every <= 3600:
            raise InputError(f"commit_every must be between 0 and 3600 seconds, not {self.commit_every:g}")
        if self.max_open_files < 1:
            raise InputError(f"max_open_files must be at least 1, not {self.max_open_files}")
        if self.proxy_of is not None and self.proxy_of == self.run:
            raise InputError(f"run {self.run!r} cannot be a proxy of itself")


@dataclass
class RunState:
    """What the watcher knows of one run between cycles."""

    envelope: dict = field(default_factory=dict)  # metric -> (min, max) of the finite values stored
    due: bool = True  # diagnose at the next chance (new rows arrived)
    urgent: bool = True  # ... at once (a non-finite value or a jump out of the envelope)
    last_diagnosed: float = 0.0
    alert: dict | None = None  # the run's open alert (its latest revision), from the store at first use
    alert_loaded: bool = False
    saved: tuple | None = None  # (verdict, onset, confidence) last written to findings


@dataclass
class CycleReport:
    rows: int = 0
    files: int = 0
    more: bool = False  # a file held more than one look read: the next cycle goes on at once
    diagnosed: int = 0
    alerts: list = field(default_factory=list)
    held_s: float = 0.0  # how long the cycle kept the database file open (others wait meanwhile)
    store_error: str | None = None  # the store could not be written (disk full ...): nothing stored, retried


class Watcher:
    def __init__(self, config: WatchConfig, store, out=None, err=None) -> None:
        self.config, self.store = config, store
        self.out, self.err = out or sys.stdout, err or sys.stderr
        alerts = check_alerts_path(config.alerts, config.paths) if config.alerts else None
        self.sink = AlertSink(alerts, config.webhook, self.out, self.err)
        self.files: dict[tuple[int, int], FollowedFile] = {}
        self.runs: dict[str, RunState] = {}
        self.saved: dict[int, dict] = {}  # source_id -> stored position (to resume a file seen again)
        self.scratch = _scratch_folder()
        self.own = OwnFiles(alerts, store.path.absolute() if store.path is not None else None, self.scratch)
        self.pool = OpenFiles(_descriptor_budget(config.max_open_files))
        self.claims: Claims | None = None
        self.elsewhere: dict[tuple[int, int], int] = {}  # logs another watcher follows -> its PID
        self._said: set[str] = set()
        self._once = False  # run(once=True): a store that cannot be written stops the watcher
        # the first upkeep at a random point of the first period: watchers started together on one
        # catalog spread their compactions out instead of all conflicting at the same moment
        self._compacted = time.monotonic() - random.uniform(0.0, self.config.compact_minutes * 60)
        self._committed_at = float("-inf")  # when a cycle last stored rows (a catalog batches calm ones)
        self._peeked: dict[tuple[int, int], dict] = {}  # per file: the ranges its rows had, committed or not
        every = config.commit_every
        self.commit_every = every if every is not None else (3.0 if store.catalog is not None else 0.0)
        self._refused_paths: dict[str, tuple[int, int]] = {}
        self._paths: dict[str, FollowedFile] = {}
        self.roled: set[str] = set()  # runs whose role/proxy this session set already
        self.held: list[float] = []  # per cycle: seconds the database file was kept open
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Check the options against the store, claim the logs (refused, InputError, when another
        watcher follows one of them into this store) and take up the stored positions."""
        try:
            if self.config.proxy_of is not None and not self.store.has_run(self.config.proxy_of):
                raise InputError(f"--proxy-of {self.config.proxy_of!r}: no such run; ingest the full run first")
            if self.store.path is not None:
                try:
                    self.store.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise InputError(f"{self.store.path}: cannot create the run database's folder "
                                     f"({exc.strerror or exc})") from None
            # the store is read (and a foreign or damaged file refused) before the claims file is
            # made beside it: a refused store is left with nothing new next to it
            self.saved = {int(p["source_id"]): p for p in self.store.watch_positions()}
            self.claims = Claims(self.store.path)
            self._scan()
            if self.elsewhere:
                (key, pid), = list(self.elsewhere.items())[:1]
                path = next((p for p, k in self._refused_paths.items() if k == key), "a log")
                more = f" (and {len(self.elsewhere) - 1} more of its logs)" if len(self.elsewhere) > 1 else ""
                raise InputError(f"{shown(path)}{more} is already followed into {shown(self.store.label)} by another "
                                 f"moeproxy watch (PID {pid or 'unknown'}); two would store every row twice: stop "
                                 "that one first, or use another --db")
        except BaseException:
            self.close()
            raise
        self._started = True

    def run(self, stop: threading.Event | None = None, once: bool = False) -> None:
        """Cycle until ``stop`` is set (or, ``once``, until the bytes the files held are read)."""
        stop = stop or threading.Event()
        self._once = once
        if not self._started:
            self.start()
        try:
            while not stop.is_set():
                started = time.monotonic()
                report = self.cycle()
                self.held.append(report.held_s)
                if once and report.store_error:  # --once cannot wait for the disk to be freed
                    raise StoreUnavailable(report.store_error)
                if once and not report.more:  # what the files held at the start is in (a log that
                    break                         # keeps growing does not keep --once going)
                if not once and not report.more:  # a look every interval; a backlog is read on at once
                    stop.wait(max(0.0, started + self.config.interval - time.monotonic()))
        finally:
            self.close()

    def close(self) -> None:
        for f in self.files.values():
            f.let_go()
        self.files.clear()
        if self.claims is not None:
            self.claims.close()
        self.sink.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def say(self, message: str, once_key: str | None = None, err: bool = False) -> None:
        if once_key is not None:
            if once_key in self._said:
                return
            self._said.add(once_key)
        print(message, file=self.err if err else self.out, flush=True)

    # -- one cycle -------------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        report = CycleReport()
        self.sink.retry()  # alerts a full disk kept out of the alerts file
        self._scan()
        chunks = self._read()  # files are read and parsed before the store is opened
        if chunks and self._calm(chunks):
            # nothing urgent, and a commit was made a moment ago: the files are read again from their
            # stored positions at the next cycle, these rows with the new ones, in one commit
            chunks = []
        if not chunks and not any(state.due for state in self.runs.values()):
            self._compact_due()
            return report
        try:
            for attempt in range(COMMIT_ATTEMPTS):
                try:
                    with self.store.held():  # one open of the file for the rows and the series to diagnose
                        opened = time.monotonic()
                        for chunk, result in self._store(chunks) if chunks else []:
                            self._committed(chunk, result, report)
                        if chunks:
                            self._committed_at = time.monotonic()
                        frames = self._frames_due()
                        report.held_s = time.monotonic() - opened
                    break
                except WriteConflict:
                    # a catalog's commit lost to another writer's: nothing of it was stored and the chunks
                    # are still in hand, so it is written again now rather than at the next cycle
                    if attempt == COMMIT_ATTEMPTS - 1:
                        raise
                    time.sleep((0.02 + 0.08 * random.random()) * 2 ** attempt)
        except StoreBusy as exc:
            self.say(f"moeproxy watch: {exc}; trying again", err=True)
            return report
        except StoreUnavailable as exc:  # the store's condition, not a file's: every file kept, read again
            report.store_error = str(exc)
            if not self._once:  # (--once stops on it: the command's one error line says it)
                self.say(f"moeproxy watch: {exc}; trying again", once_key=f"store:{exc}", err=True)
            return report
        report.diagnosed = self._diagnose(frames, report)
        self._compact_due()
        return report

    def _calm(self, chunks: list[Chunk]) -> bool:
        """Whether these chunks can wait for the next commit (``commit_every``): no new file, no
        backlog, no run of ``--once``, and no row urgent (a metric's first non-finite value, or a
        value beyond the range its metric had in the rows read so far)."""
        calm = not self._once and time.monotonic() - self._committed_at < self.commit_every
        for c in chunks:  # (every chunk's ranges are taken in, whatever the answer)
            calm = calm and c.file.source_id is not None and not c.more
            if c.parsed is not None and len(c.parsed.rows):
                envelope = self._peeked.setdefault(c.file.identity, {})
                calm = not _breaks_envelope(c.parsed.rows, envelope) and calm
        return calm

    def _compact_due(self) -> None:
        """A DuckLake catalog's upkeep every ``compact_minutes`` (a file store needs none): without
        it every cycle's commit would stay a small file of its own. A failure is said and retried."""
        if getattr(self.store, "catalog", None) is None:
            return
        if time.monotonic() - self._compacted < self.config.compact_minutes * 60:
            return
        self._compacted = time.monotonic()
        try:
            # a snapshot older than one compaction period is no reader's: expired with the files only it kept
            # and one upkeep per period for the whole catalog: the watcher that claims it first
            done = self.store.compact(keep_minutes=self.config.compact_minutes,
                                      every_minutes=self.config.compact_minutes)
            if "skipped" in done:
                self.say(f"moeproxy watch: {self.store.label} was compacted by {done['skipped']}; "
                         f"not again before {self.config.compact_minutes:g} min", err=True)
            else:
                self.say(f"moeproxy watch: compacted {self.store.label}: {done['files_before']} -> "
                         f"{done['files_after']} data files", err=True)
        except (StoreBusy, StoreUnavailable, InputError, duckdb.Error) as exc:
            # the claim was given back; this watcher tries again after a tenth of the period (an upkeep
            # that failed never stops the watching: the rows are stored whether or not files get merged)
            self._compacted = time.monotonic() - 0.9 * self.config.compact_minutes * 60
            self.say(f"moeproxy watch: compaction of {self.store.label} failed ({exc}); trying again later", err=True)

    def _scan(self) -> None:
        """Follow every regular file under the watched paths that this watcher does not write
        itself and no other watcher follows into this store; let go of those gone and read to the
        end. A file is only looked at (``stat``) here: it is opened when read."""
        seen: set[tuple[int, int]] = set()
        fresh: list[tuple[Path, str, os.stat_result]] = []
        for given in self.config.paths:
            p = Path(given).absolute()
            try:
                if p.is_dir():
                    found = sorted(f for f in p.rglob("*")
                                   if not any(part.startswith(".") for part in f.relative_to(p).parts))
                else:
                    found = [p]
            except OSError as exc:  # a folder that cannot be listed (now)
                self.say(f"moeproxy watch: {shown(p)}: cannot be listed ({exc.strerror or exc}); trying again",
                         once_key=f"list:{p}", err=True)
                continue
            for path in found:
                try:
                    st = path.stat()
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    if path == p and not stat.S_ISDIR(st.st_mode):
                        self.say(f"moeproxy watch: {shown(path)}: not a regular file; not followed",
                                 once_key=f"open:{path}", err=True)
                    continue
                key = (st.st_dev, st.st_ino)
                if self.own.owns(path, key):
                    continue
                seen.add(key)
                f = self.files.get(key)
                if f is not None:
                    f.path = path  # renamed (rotated): still the same file
                    f.seen = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                    continue
                fresh.append((path, self.config.run or default_run_name(path, p), st))
        if fresh:
            self._follow_new(fresh)
        for key, f in list(self.files.items()):
            if key in seen:
                continue
            try:
                done = bool(f.failed) or f.size() <= f.position
            except (OSError, InputError):
                done = True
            if done:
                self._let_go(key)

    def _let_go(self, key: tuple[int, int]) -> None:
        f = self.files.pop(key)
        f.let_go()
        for other in self.files.values():
            if other.copy_of is f:  # the original is gone: its copy goes on from where it was
                other.copy_of = None
                try:
                    if other.adopt(f.before_rewrite or f.snapshot()):
                        self._adopted(other, f)
                except (OSError, InputError):
                    pass
        if self.claims is not None:
            self.claims.release(key)

    def _follow_new(self, fresh: list[tuple[Path, str, os.stat_result]]) -> None:
        """Claim the new files, then follow each (taking up a stored position where one fits)."""
        claimed = []
        taken_over = False
        for path, run, st in fresh:
            key = (st.st_dev, st.st_ino)
            holder = self.claims.claim(key) if self.claims is not None else None
            if holder is not None:
                if key not in self.elsewhere and self._started:  # at start: refused as a whole
                    self.say(f"moeproxy watch: {shown(path)}: followed into this store by another moeproxy watch "
                             f"(PID {holder or 'unknown'}); not followed here while it does", err=True)
                self.elsewhere[key] = holder
                self._refused_paths[str(path)] = key
                continue
            if self.elsewhere.pop(key, None) is not None:
                taken_over = True  # the other watcher stopped: its positions are newer than ours
            claimed.append((path, run, st))
        if taken_over:
            try:
                self.saved = {int(p["source_id"]): p for p in self.store.watch_positions()}
            except StoreBusy as exc:
                self.say(f"moeproxy watch: {exc}; trying again", err=True)
                for path, run, st in claimed:
                    self.claims.release((st.st_dev, st.st_ino))
                    self.elsewhere[(st.st_dev, st.st_ino)] = 0
                return
        index = _SavedIndex(self.saved, {g.source_id for g in self.files.values()})
        self._paths = {str(f.path): f for f in self.files.values()}  # for _match_copy, this scan
        for path, run, st in claimed:
            self._follow(path, run, st, index)

    def _follow(self, path: Path, run: str, st: os.stat_result, index: "_SavedIndex") -> None:
        key = (st.st_dev, st.st_ino)
        try:
            f = FollowedFile.open(path, run, self.scratch, self.pool)
        except InputError as exc:
            self.say(f"moeproxy watch: {exc}", once_key=f"open:{path}", err=True)
            if self.claims is not None:
                self.claims.release(key)
            return
        except OSError as exc:  # out of descriptors: fewer held from now on, tried again next scan
            self.pool.shrink()
            self.say(f"moeproxy watch: {shown(path)}: cannot be opened ({exc.strerror or exc}); trying again",
                     once_key=f"os:{path}", err=True)
            if self.claims is not None:
                self.claims.release(key)
            return
        f.seen = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        for saved in index.candidates(run, path, f.identity):
            if f.resume(saved):
                self.say(f"{shown(path)}: run {run!r}, taken up at byte {f.position:,} (line {f.lines:,})")
                self.runs.setdefault(run, RunState())  # diagnosed once: an alert a killed watcher owed
                index.taken.add(f.source_id)
                break
        if f.source_id is None:
            self._match_copy(f)
        self.files[f.identity] = f
        self._paths[str(path)] = f

    # -- copies (copy-and-truncate rotation) --------------------------------------------------------
    def _match_copy(self, c: FollowedFile) -> None:
        """A new file named like a followed file of its run plus a suffix (``metrics.jsonl.1``,
        ``metrics.jsonl-20240101``) that starts with the bytes read of it is a copy: it goes on from
        where that file was before it was truncated, or waits (is not read) while that file still
        holds the same bytes; a copy that turns out to hold only bytes read already is never read."""
        folder, name = str(c.path.parent), c.path.name
        by_path = self._paths
        for cut in range(len(name) - 1, 0, -1):  # the longest name first: metrics.jsonl before metrics
            f = by_path.get(os.path.join(folder, name[:cut]))
            if f is None or f.run != c.run:
                continue
            try:
                if f.before_rewrite is not None and c.adopt(f.before_rewrite):
                    self._adopted(c, f)
                    return
                if f.position > 0 and self._starts_like(c, f):
                    c.copy_of = f
                    return
            except (OSError, InputError):
                continue

    @staticmethod
    def _starts_like(c: FollowedFile, f: FollowedFile) -> bool:
        """Whether ``c`` starts with the bytes ``f`` has read (or, shorter, is ``f``'s first bytes)."""
        size = c.size()
        if size >= f.position:
            return c.prefix_sha(f.position) == f.hasher.hexdigest()
        return c.prefix_sha(size) == f.prefix_sha(size) and f.rewritten(f.size()) is False

    def _adopted(self, c: FollowedFile, f: FollowedFile) -> None:
        f.before_rewrite = None
        c.copy_of = None
        self.say(f"{shown(c.path)}: a copy of {shown(f.path)} made before it was truncated; read on from byte "
                 f"{c.position:,} as the same source of run {c.run!r}")

    def _copy_ready(self, c: FollowedFile) -> bool:
        """Whether a copy waiting on its original may be read now (see ``_match_copy``)."""
        f = c.copy_of
        if f.before_rewrite is not None:  # the original was truncated: go on from where it was
            c.copy_of = None
            if c.adopt(f.before_rewrite):
                self._adopted(c, f)
            return True
        if f.position >= c.size() and c.prefix_sha(c.size()) == f.prefix_sha(c.size()):
            c.copy_of = None
            c.failed = f"a copy of the first {c.size():,} bytes of {f.path}, read from there"
            self.say(f"{shown(c.path)}: {c.failed}; not read again")
            return False
        return False

    def _read(self) -> list[Chunk]:
        chunks = []
        for f in list(self.files.values()):
            if f.failed or (f.seen is not None and f.seen == f.looked):
                continue  # nothing changed since the last read found nothing new (not even opened)
            try:
                if f.copy_of is not None and not self._copy_ready(f):
                    continue
                before = f.before_rewrite
                chunk = f.pending(self.config.max_chunk_bytes)
            except FileGone:
                self._let_go(f.identity)
                continue
            except (FollowError, InputError) as exc:
                f.failed = str(exc)
                self.say(f"moeproxy watch: {exc}; no longer followed", err=True)
                continue
            except OSError as exc:
                self.pool.shrink()
                self.say(f"moeproxy watch: {shown(f.path)}: {exc.strerror}; trying again", once_key=f"os:{f.path}",
                         err=True)
                continue
            if f.before_rewrite is not before:  # truncated: a copy waiting on it goes on from there
                for c in self.files.values():
                    if c.copy_of is f:
                        try:
                            self._copy_ready(c)
                        except (OSError, InputError):
                            c.copy_of = None
            f.looked = f.seen if chunk is None else None
            if chunk is not None:
                if f.fresh_start:
                    self.say(f"{shown(f.path)}: rewritten from the start; read again from its start (a new attempt of "
                             f"run {f.run!r} where its steps repeat stored ones)")
                    f.fresh_start = False
                for warning in chunk.warnings:  # (once: a chunk left for the next commit is read again)
                    self.say(f"moeproxy watch: warning: {warning}", once_key=f"warning:{f.path}:{warning}", err=True)
                chunks.append(chunk)
        return chunks

    def _store(self, chunks: list[Chunk]) -> list[tuple[Chunk, dict | None]]:
        """Store the chunks' rows and positions in one transaction (a chunk that fails alone is
        named, its file no longer followed, and the others stored without it)."""
        try:
            with self.store.write() as tx:
                batch = _Batch(self, tx)
                results = batch.store(chunks)
            self.roled |= batch.roled  # (only once committed: a lost commit sets them again)
            return results
        except StoreUnavailable:
            raise  # not the chunk's fault: no file is let go
        except InputError as exc:
            if len(chunks) == 1:
                chunks[0].file.failed = str(exc)
                self.say(f"moeproxy watch: {chunks[0].file.path}: {exc}; no longer followed", err=True)
                return []
        out = []
        for chunk in chunks:
            out += self._store([chunk])
        return out

    def _committed(self, chunk: Chunk, result: dict | None, report: CycleReport) -> None:
        f = chunk.file
        new = f.source_id is None and result is not None
        f.commit(chunk)
        report.files += 1
        report.more = report.more or chunk.more
        if result is None:
            return
        f.source_id, f.totals = result["source_id"], result["totals"]
        self.saved[f.source_id] = result["position"]
        if new:
            self.say(f"{f.path}: following as run {f.run!r} ({f.format})")
        frame = result["frame"]
        if frame is None or frame.empty:
            return
        report.rows += len(frame)
        state = self.runs.setdefault(f.run, RunState())
        state.due = True
        state.urgent = _breaks_envelope(frame, state.envelope) or state.urgent

    # -- diagnosis and alerts ----------------------------------------------------------------------
    def _frames_due(self) -> dict:
        """run -> its series (the store's one reader), for the runs to diagnose now."""
        now = time.monotonic()
        frames = {}
        for run, state in self.runs.items():
            if not state.due or not (state.urgent or now - state.last_diagnosed >= self.config.diagnose_every):
                continue
            state.due = state.urgent = False
            state.last_diagnosed = now
            if not state.alert_loaded:
                stored = self.store.alerts(run)
                state.alert, state.alert_loaded = (stored[-1] if stored else None), True
                for alert in self.sink.missing(stored):  # recorded, then killed before it was written
                    self.sink.emit(alert)
            frames[run] = self.store.run_frame(run)
        return frames

    def _diagnose(self, frames: dict, report: CycleReport) -> int:
        from moeproxy.diagnose.record import diagnose_frames, record_in

        updates = []  # (run, result or None, alert or None)
        results = diagnose_frames({run: frame for run, frame in frames.items() if not frame.empty})
        for run, result in results.items():
            state, frame = self.runs[run], frames[run]
            if isinstance(result, Exception):  # a detector's bug must not stop the ingest
                self.say(f"moeproxy watch: run {run!r}: diagnosis failed ({type(result).__name__}: "
                         f"{str(result)[:300]}); its rows are stored, it is diagnosed again when it grows", err=True)
                continue
            gap = float((result.get("data") or {}).get("step_gap") or 1.0)  # the diagnosis measured it
            alert = next_alert(state.alert, run, result, int(frame["step"].max()), tie_steps=2 * gap)
            changed = (result["verdict"], result["onset_step"], result.get("confidence")) != state.saved
            if alert is not None or changed:
                updates.append((run, result if changed else None, alert))
        if updates:
            try:
                with self.store.write() as tx:
                    for run, result, alert in updates:
                        run_id = self.store.run_id(tx.con, run)
                        if result is not None:
                            record_in(tx, run_id, result)
                        if alert is not None:
                            tx.add_alert(run_id, alert)
            except (StoreBusy, StoreUnavailable) as exc:  # nothing recorded: diagnosed and alerted at the next cycle
                if isinstance(exc, StoreUnavailable):  # (a full disk: said once; --once stops on it)
                    report.store_error = str(exc)
                    if not self._once:
                        self.say(f"moeproxy watch: {exc}; trying again", once_key=f"store:{exc}", err=True)
                else:
                    self.say(f"moeproxy watch: {exc}; trying again", err=True)
                for run, _, _ in updates:
                    self.runs[run].due = self.runs[run].urgent = True
                return len(frames)
            for run, result, alert in updates:
                state = self.runs[run]
                if result is not None:
                    state.saved = (result["verdict"], result["onset_step"], result.get("confidence"))
                if alert is not None:
                    state.alert = alert
                    self.sink.emit(alert)
                    report.alerts.append(alert)
        return len(frames)


class _Batch:
    """One cycle's writes in few statements: the runs' ids, name mappings and extents read once,
    every chunk's rows inserted in one statement, the sources' totals and the files' positions
    updated in one each (per-chunk statements made the transaction, and the time others wait for
    the file, grow with the number of runs). A second chunk of one run in a cycle (two files of a
    run) is checked for repeated steps against the rows of the first, written first."""

    def __init__(self, watcher: Watcher, tx) -> None:
        self.watcher, self.tx = watcher, tx
        self.parts: list[tuple[int, int, object]] = []
        self.totals: list[dict] = []
        self.positions: list[dict] = []
        self.roled: set[str] = set()

    def store(self, chunks: list[Chunk]) -> list[tuple[Chunk, dict | None]]:
        config, tx = self.watcher.config, self.tx
        wanted = [c for c in chunks if c.file.source_id is not None or len(c.parsed.rows)]
        names = sorted({c.file.run for c in wanted})
        known, self.mappings, self.extents = tx.runs_state(names) if names else ({}, {}, {})
        for c in wanted:  # new runs, and a role or proxy given on the command line, once per session
            run = c.file.run
            if run not in known or (run not in (self.watcher.roled | self.roled) and (config.role != "other" or config.proxy_of)):
                new = run not in known
                known[run] = tx.ensure_run(run, config.role, config.proxy_of, c.parsed.framework, c.file.format)
                if new:  # (nothing of a run made now is stored yet)
                    self.mappings[known[run]], self.extents[known[run]] = {}, (None, None)
            self.roled.add(run)
        self.pending_runs: set[int] = set()
        chosen = {id(c) for c in wanted}
        results = [(c, self._chunk(c, known[c.file.run]) if id(c) in chosen else None) for c in chunks]
        tx.add_scalar_parts(self.parts)
        tx.update_watched(self.totals, self.positions)
        return results

    def _chunk(self, chunk: Chunk, run_id: int) -> dict:
        tx, f, parsed = self.tx, chunk.file, chunk.parsed
        totals = {"rows": 0, "steps": 0, "metrics": 0, "nonfinite": 0, "attempts": 0, "skipped_lines": 0} | {
            k: int(v) for k, v in f.totals.items() if v is not None and v == v}
        frame = None
        if len(parsed.rows):
            if run_id in self.pending_runs:  # a second chunk of this run: its first one is written first
                tx.add_scalar_parts(self.parts)
                self.parts, self.pending_runs = [], set()
                self.extents[run_id] = tx.run_extents([run_id])[run_id]
            frame, routing, names = rows_to_store(tx, run_id, parsed.rows, self.mappings[run_id],
                                                  self.extents[run_id], takeover=True)
            tx.add_metric_names(run_id, names, known=self.mappings[run_id])
            self.mappings[run_id] = self.mappings[run_id] | names
            counts = frame.counts()
            totals["rows"] += counts["rows"]
            totals["steps"] += counts["steps"]
            totals["metrics"] = max(totals["metrics"], counts["metrics"])
            totals["nonfinite"] += counts["nonfinite"]
            totals["attempts"] = max(totals["attempts"], counts["attempts"])
        totals["skipped_lines"] += parsed.skipped_lines
        record = totals | {"sha256": chunk.sha256(), "bytes": chunk.end}
        source_id = f.source_id
        if source_id is None:
            source_id = tx.add_source(run_id, record | {
                "path": str(f.path), "format": f.format, "framework": parsed.framework,
                "step_from_index": parsed.step_from_index})
        position = {"source_id": source_id, "run_id": run_id, "path": str(f.path), "device": f.identity[0],
                    "inode": f.identity[1], "position": chunk.end, "lines": f.lines + chunk.lines,
                    "format": f.format, "header": f.header, "index_base": chunk.index_base}
        if frame is not None:
            self.parts.append((run_id, source_id, frame))
            self.pending_runs.add(run_id)
            tx.add_routing(run_id, source_id, routing)
        if f.source_id is None:  # (add_source stored its totals)
            tx.save_watch_position(position, new=True)
        else:
            self.totals.append(record | {"source_id": source_id})
            self.positions.append(position)
        return {"source_id": source_id, "totals": totals, "frame": frame, "position": position | {
            "run": f.run, "sha256": record["sha256"], **totals}}


class _SavedIndex:
    """The stored positions by file identity, by path and by folder, for one scan's new files: a
    file resumes the source saved for it, for its path, or (a copy made of a followed file) for a
    file of its folder whose name begins its own."""

    def __init__(self, saved: dict[int, dict], taken: set) -> None:
        self.taken = set(taken)
        self.by_id: dict[tuple, list] = {}
        self.by_folder: dict[str, list] = {}
        for s in saved.values():
            self.by_id.setdefault((int(s["device"] or 0), int(s["inode"] or 0)), []).append(s)
            self.by_folder.setdefault(str(Path(s["path"]).parent), []).append(s)

    def candidates(self, run: str, path: Path, identity: tuple[int, int]) -> list[dict]:
        found = {int(s["source_id"]): s for s in self.by_id.get(identity, [])}
        for s in self.by_folder.get(str(path.parent), []):
            if path.name.startswith(Path(s["path"]).name):
                found[int(s["source_id"])] = s
        chosen = [s for i, s in found.items() if s["run"] == run and i not in self.taken]
        chosen.sort(key=lambda s: ((int(s["device"] or 0), int(s["inode"] or 0)) != identity, s["path"] != str(path),
                                   -int(s["source_id"])))
        return chosen


def _descriptor_budget(wanted: int) -> int:
    """How many followed files may hold a descriptor: ``wanted``, at most a quarter of the
    process's limit (the database, the webhook and Python's own files need the rest)."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // 4))


def _scratch_folder() -> Path:
    """A private folder for the scratch copies of new bytes, named with this process id; those of
    watchers no longer alive (killed with -9: no clean-up ran) are removed."""
    from moeproxy.pids import pid_alive

    root = Path(tempfile.gettempdir())
    for old in root.glob("moeproxy-watch-*-*"):
        pid = old.name.split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"moeproxy-watch-{os.getpid()}-"))


def _breaks_envelope(rows: Columns, envelope: dict) -> bool:
    """Whether new rows bring a metric's first non-finite value, or leave the range its finite
    values had so far by more than that range (the ranges are updated)."""
    codes, names, values = rows.code, rows.names, rows.value
    finite = np.isfinite(values)
    n = len(names)
    lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(lo, codes[finite], values[finite])
    np.maximum.at(hi, codes[finite], values[finite])
    bad = np.zeros(n, bool)
    bad[codes[~finite]] = True
    urgent = False
    for i, name in enumerate(names):
        old_lo, old_hi, old_bad = envelope.get(name, (np.inf, -np.inf, False))
        if bad[i] and not old_bad:
            urgent = True
        if lo[i] <= hi[i] and old_lo <= old_hi:
            width = old_hi - old_lo
            urgent = urgent or lo[i] < old_lo - width or hi[i] > old_hi + width
        envelope[name] = (min(lo[i], old_lo), max(hi[i], old_hi), old_bad or bool(bad[i]))
    return urgent
