"""The app's access point to runs: discovery under the root, fresh stores, background ingest, progress.

One :class:`Board` per process. Ingest runs in a background thread per run so that a request never
waits for a long ingest: it gets the last committed state and the progress of the one under way.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from data.access import Backoff
from data.config import Settings, load_settings
from data.ingest import IngestResult, ingest_run
from data.ingest.options import RUN_FILE
from data.ingest.run import BIG_CATCH_UP
from data.looks import all_old, signature
from data.remote import as_path
from data.run_context import RunContext, context_of
from data.store import (
    RootScan,
    RunStore,
    UnknownRun,
    open_store,
    scan_root,
    store_dir_for,
)
from data.store.manifest import MANIFEST, older_stores
from data.store.reading import page_notices
from data.views.paths import shown_run, unknown_run_notice

__all__ = [
    "Board",
    "IngestStatus",
    "RunContext",
    "UnknownRun",
    "board",
    "configure",
    "open_run",
]

log = logging.getLogger(__name__)

# Live runs: a run whose files changed since the last look is read at that look, the last step of each file
# hidden (a trainer may be writing it: rank files one after the other, a long line in pieces) until the
# files stay still for SETTLE_SECONDS after that cut (see _ingest): a page is about one look behind.
SETTLE_SECONDS = 1.0
# A look is due this fraction of RLBOARD_REFRESH_SECONDS after the last: the shell polls every period, and a
# poll a little early (its timer, a slow answer) skipped its look, leaving two periods between looks.
DUE_FRACTION = 0.75
# The runs found under the root are reused this long: a page load's layout and callbacks look a run up
# 5-10 times within a second, and each look listed the root and every run folder (15-19 listings per
# reward page load). A name not among them is looked for afresh, so a new run is found at once, and a
# root that changed (its mtime, ctime, mode or inode) is listed again at once.
RUNS_SECONDS = 5.0


@dataclass
class IngestStatus:
    """Progress of the ingest under way for a run (bytes read of bytes to read)."""

    running: bool = False
    done: int = 0
    total: int = 0
    error: str | None = None  # why the last ingest failed; kept until one succeeds
    failures: int = 0  # ingests failed in a row (tried again after a back-off, see Board._failures)
    # A read whose files may be mid-step: its last steps are hidden until the files are seen still.
    settling: bool = False
    # That first read makes the run's store: nothing was committed before it (pages wait for its settle).
    new_store: bool = False
    # The format of the run's store an older version wrote, which this read replaces (None: none).
    rebuilding: int | None = None
    last: IngestResult | None = None

    @property
    def fraction(self) -> float:
        return 1.0 if not self.total else min(1.0, self.done / self.total)


class Board:
    """Runs under one rollout root and their stores in one cache folder."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._status: dict[str, IngestStatus] = {}
        self._checked: dict[str, float] = {}
        self._files_seen: dict[str, tuple[tuple, float]] = {}
        # Per run, what its last whole read (complete, committed or finding nothing new) saw: the files'
        # signature and the marks of the store and of the run's settings file (see _marks). While all are
        # the same, a check has nothing to read and is not made (see refresh).
        self._read_at: dict[str, tuple] = {}
        # What could not be read (the root, a run's folder, a run's ingest) is tried again only after a
        # wait that doubles up to a minute: an unreadable root must not be listed on every request.
        self._failures = Backoff(first=1.0, most=60.0)
        self._scan: tuple[float, tuple | None, RootScan] | None = None

    @property
    def root(self) -> Path:
        return self.settings.root

    def scan(self, fresh: bool = False) -> RootScan:
        """The runs under the root and what could not be read there (never raises for that); looked for
        again at most every ``RUNS_SECONDS`` unless ``fresh``."""
        now = time.monotonic()
        try:
            # A root unmounted, made unreadable or given a new run folder looks different at once: only
            # an unchanged root is answered from memory.
            st = as_path(self.settings.root).stat()
            seen = (st.st_dev, st.st_ino, st.st_mode, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            seen = None
        with self._lock:
            hit = self._scan
        if (
            not fresh
            and seen is not None
            and hit is not None
            and hit[1] == seen
            and 0 <= now - hit[0] < RUNS_SECONDS
        ):
            return hit[2]
        scan = scan_root(self.settings.root, self._failures)
        with self._lock:
            self._scan = (now, seen, scan)
        return scan

    def runs(self) -> dict[str, Path]:
        return self.scan().runs

    def run_dir(self, run: str | None) -> Path:
        """Folder of a known run; raises :class:`UnknownRun` for anything else (never joins paths)."""
        runs = self.runs()
        if isinstance(run, str) and run not in runs:
            runs = self.scan(fresh=True).runs  # a run that appeared since the last look
        if not isinstance(run, str) or run not in runs:
            raise UnknownRun(f"unknown run {run!r}")
        return runs[run]

    def split(self, run: str) -> str:
        """Which of its folder's files a run is made of: ``"train"``, or ``"validation"`` for the run
        ``"<folder> (validation)"`` (see data.store.runs)."""
        return self.scan().split(run)

    def store_dir(self, run: str) -> Path:
        return store_dir_for(
            self.settings.cache_dir, self.run_dir(run), self.settings.pad_tokens, self.split(run)
        )

    def _reading(self, run: str, split: str | None = None) -> dict:
        """The arguments of ingest_run that say how the run is read (its split, the dialect and reward
        weight settings)."""
        s = self.settings
        split = self.split(run) if split is None else split
        return {
            "split": split,
            "dialect": s.dialect,
            "reward_weights": s.reward_weights,
            "tokenizer": s.tokenizer,
            "root": s.root,  # its rlboard.toml's [fields]
        }

    def status(self, run: str) -> IngestStatus:
        with self._lock:
            return self._status.setdefault(run, IngestStatus())

    def ingest_now(self, run: str, progress=None) -> IngestResult:
        """Ingest in the calling thread (command line, tests)."""
        return ingest_run(
            self.run_dir(run),
            self.settings.cache_dir,
            self.settings.pad_tokens,
            progress=progress,
            shared=self.settings.shared,
            **self._reading(run),
        )

    def refresh(self, run: str, force: bool = False) -> None:
        """Start a background ingest of ``run`` unless one runs or the last check is too recent."""
        run_dir = self.run_dir(run)
        split = self.split(run)  # before taking the lock: the scan takes it too
        now = time.monotonic()
        with self._lock:
            t = self._threads.get(run)
            if t is not None and t.is_alive():
                return
            due = DUE_FRACTION * self.settings.refresh_seconds
            if not force and now - self._checked.get(run, -1e9) < due:
                return
            if self._failures.pending(("ingest", run)) is not None:
                return  # the last ingest failed: wait out its back-off, forced or not
            sig = signature(run_dir, split)
            # Read up to this cut of the files: lines a trainer appends from now on wait for the next
            # ingest, so a step is never committed half-way.
            limits = {name: size for name, size, _, _ in sig}
            settle = None
            if not force and run in self._checked:
                state = self._settled(run, sig, now)
                if state is None:
                    return
                # Files that changed since the last look are read now, their last steps hidden until the
                # files are seen still for SETTLE_SECONDS after this cut (see _ingest).
                complete = state == "still"
                settle = None if complete else (sig, now)
                if complete and self._read_at.get(run) == (sig, self._marks(run_dir, split)):
                    # Nothing changed since its last whole read: no file, no commit (by another process or
                    # replica), no settings file. A check would find nothing (~20-40 ms of CPU a run,
                    # beside the pages' answers, every refresh_seconds).
                    self._checked[run] = now
                    return
            else:
                # This process's first look at the run (or one forced because nothing is committed): its
                # files may be mid-step as well. Unless they are clearly old, the last step of each file is
                # hidden until they are seen still for SETTLE_SECONDS after this cut (see _ingest).
                complete = all_old(sig)
                settle = None if complete else (sig, now)
            self._checked[run] = now
            self._files_seen[run] = (sig, now)
            # The error of a failed ingest stays shown until one succeeds (pages show it meanwhile).
            status = self._status.setdefault(run, IngestStatus())
            status.running, status.done, status.total = True, 0, 0
            status.settling = settle is not None
            status.new_store = (
                status.settling
                and open_store(store_dir_for(self.settings.cache_dir, run_dir, self.settings.pad_tokens))
                is None
            )
            # (Looked for at this process's first read of the run only: later ones find its store.)
            status.rebuilding = self._older_format(run_dir, split) if status.last is None else None
            self._read_at.pop(run, None)
            t = threading.Thread(
                target=self._ingest,
                args=(run, run_dir, status, limits, complete, settle, self._reading(run, split), sig),
                name=f"ingest-{run}",
                daemon=True,
            )
            self._threads[run] = t
            t.start()

    def _older_format(self, run_dir: Path, split: str) -> int | None:
        """The format of the run's store an older version wrote, when the run has no store of this version
        yet (its read rebuilds it from the rollout files); else None."""
        store_dir = store_dir_for(self.settings.cache_dir, run_dir, self.settings.pad_tokens, split)
        if open_store(store_dir) is not None:
            return None
        older = older_stores(store_dir, str(as_path(run_dir).resolve()), list(self.settings.pad_tokens))
        return max((fmt for _, fmt in older), default=None)

    def _settled(self, run: str, sig: tuple, now: float) -> str | None:
        """``"still"`` when the run's files (names, sizes, mtimes) have looked the same for SETTLE_SECONDS,
        ``"changed"`` when they differ from the last look, else None (the same, for less time: the read
        that look started settles them). Compared between looks, not with the clock, so a file server's
        clock does not matter."""
        prev = self._files_seen.get(run)
        if prev is not None and prev[0] == sig:
            return "still" if now - prev[1] >= SETTLE_SECONDS else None
        return "changed"

    def _marks(self, run_dir: Path, split: str) -> tuple | None:
        """What tells that a run's store or settings changed without its files changing: the store's
        ``manifest.json`` (another process or replica committed, the cache was cleared) and the run's
        settings file (its inode, size, times). None where the store is shared on object storage: only a
        check mirrors another replica's commits there."""
        if self.settings.shared is not None:
            return None
        out = []
        for path in (
            store_dir_for(self.settings.cache_dir, run_dir, self.settings.pad_tokens, split) / MANIFEST,
            as_path(run_dir) / RUN_FILE,
        ):
            try:
                st = path.stat()
            except OSError:
                out.append(None)
            else:  # (an object store's has neither inode nor change time)
                out.append(
                    tuple(getattr(st, k, None) for k in ("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns"))
                )
        return tuple(out)

    def _hides(self, run_dir: Path, split: str) -> bool:
        """Whether the run's last commit hides steps until its files are seen still (or has none)."""
        store = open_store(store_dir_for(self.settings.cache_dir, run_dir, self.settings.pad_tokens, split))
        return store is None or store.visible_below is not None

    def _ingest(
        self,
        run: str,
        run_dir: Path,
        status: IngestStatus,
        limits: dict | None = None,
        complete: bool = True,
        settle: tuple | None = None,
        reading: dict | None = None,
        sig: tuple | None = None,
    ) -> None:
        def progress(done, total):
            status.done, status.total = done, total

        reading = reading or self._reading(run)  # (given by refresh: the thread never lists the root)

        def read(complete: bool) -> IngestResult:
            return ingest_run(
                run_dir,
                self.settings.cache_dir,
                self.settings.pad_tokens,
                progress=progress,
                limits=limits,
                complete=complete,
                shared=self.settings.shared,
                **reading,
            )

        try:
            status.last = read(complete)
            whole = complete
            for again in (True, False) if settle is not None else ():
                # The files as read are whole if they stay as they were for SETTLE_SECONDS after the cut:
                # then their last steps are shown (a commit that reads nothing new). Files that grew
                # meanwhile are read once more at once, up to a new cut (the step the last cut ended in is
                # whole once the next one is written), and settle again; else the next look takes it on.
                cut, at = settle
                time.sleep(max(0.0, at + SETTLE_SECONDS - time.monotonic()))
                now_sig = signature(run_dir, reading["split"])
                if now_sig == cut:
                    if self._hides(run_dir, reading["split"]):  # (a file only touched hid nothing)
                        status.last = read(True)
                    whole = True
                    break
                if not again:
                    break
                settle = (now_sig, time.monotonic())
                limits, sig = {name: size for name, size, _, _ in now_sig}, now_sig
                with self._lock:
                    self._files_seen[run] = settle
                status.last = read(False)
            r = status.last
            if whole and sig is not None and not (r.skipped_locked or r.lost_commit or r.lost or r.deferred):
                marks = self._marks(run_dir, reading["split"])
                if marks is not None:
                    with self._lock:
                        self._read_at[run] = (sig, marks)
        except Exception as e:  # noqa: BLE001 - shown on the page; the server keeps serving
            status.failures += 1
            status.error = f"{type(e).__name__}: {e}"
            self._failures.failed(("ingest", run), status.error)
            log.error(
                "ingest of run %r failed (%d in a row; next try in %.0f s): %s",
                run,
                status.failures,
                self.retry_in(run),
                status.error,
            )
        else:
            self._failures.succeeded(("ingest", run))
            status.failures, status.error = 0, None
        finally:
            status.running = status.settling = status.new_store = False
            status.rebuilding = None

    def reading_text(self, run: str) -> str:
        """What a page shows for a run with nothing committed yet: that it is being read, or why reading it
        failed and when it is tried again."""
        failed = self.failure_notices(run)
        if failed:
            return failed[0]
        if self.status(run).rebuilding is not None:
            return f"Rebuilding run {run}'s store (written by an older version)… reload the page in a moment."
        return f"Reading run {run}… reload the page in a moment."

    def retry_in(self, run: str) -> float:
        """Seconds until the ingest of ``run``, which failed, is tried again (0: it may be now)."""
        return self._failures.retry_in(("ingest", run))

    def failure_notices(self, run: str | None) -> list[str]:
        """``[why the last ingest of run failed and when it is tried again]``, or ``[]`` when it did not
        fail: a page showing what was committed before says so beside it."""
        status = self.status(run) if run else None
        if status is None or status.error is None:
            return self.unusable_notices(run)
        retry = round(self.retry_in(run))
        return [
            f"Reading run {run} failed ({status.failures} time{'s' if status.failures != 1 else ''} in a "
            f"row): {status.error}. " + (f"Tried again in {retry} s." if retry else "Trying again now.")
        ]

    def unusable_notices(self, run: str | None) -> list[str]:
        """``[that the run has no usable line, and where to see why]`` for a run whose committed store
        holds bad lines and no response (a format the board does not read); else what it says about how
        the run was read (see :func:`data.store.reading.page_notices`)."""
        try:
            store = open_store(self.store_dir(run)) if run else None
        except UnknownRun:
            return []
        if store is None:
            return []
        errors = store.manifest.unusable_lines
        if not errors or store.manifest.rows:
            return page_notices(store)
        return [
            f"Run {run} has no usable line: all {errors:,} lines read were unusable. The Runs page (/) lists "
            "each with its reason, and which trainer's format the files were read as."
        ]

    def open_run(self, run: str | None, path: str | None = None, wait: float = 10.0) -> RunContext:
        """The one way from a URL's ``run`` to what a page shows (see :func:`data.service.open_run`): what
        the query modules call on the board they are given, so that they never import this module (nor,
        through it, ingest)."""
        notices: list[str] = []
        if path is not None:
            runs = self.runs()
            shown = shown_run(path, run, runs)
            if notice := unknown_run_notice(path, run, shown, runs, self.scan().unreadable):
                notices.append(notice)
            run = shown
        store = None
        if run:
            try:
                store = self.store(run, wait=wait)
            except UnknownRun:
                run = None if path is not None else run
        return context_of(run, store, notices)

    def store(self, run: str, wait: float = 30.0) -> RunStore | None:
        """The last committed store of ``run``, refreshing it in the background.

        When nothing is committed yet, waits up to ``wait`` seconds for the first ingest to commit, then
        returns None if it still has not (the page then shows the progress). The first read of a small run
        whose files changed lately, into a new store, hides the last steps until its files are seen still
        (about SETTLE_SECONDS): that is waited for, so that a run nobody writes shows its last step at once.
        Whether the store is new is known when that read starts (it was judged at this call's first look,
        and a read that committed before the look went unwaited for: the page lacked the last step). A run
        with a store from before answers at once from it.
        """
        self.refresh(run)
        store_dir = self.store_dir(run)
        status = self.status(run)
        store = open_store(store_dir)
        deadline = time.monotonic() + wait

        def waiting() -> bool:
            if store is None:
                return True
            return status.settling and status.new_store and status.total < BIG_CATCH_UP

        while waiting() and time.monotonic() < deadline:
            with self._lock:
                t = self._threads.get(run)
            if t is None or not t.is_alive():
                store = open_store(store_dir)
                if store is None:
                    self.refresh(run, force=True)
                    with self._lock:
                        t = self._threads.get(run)
                    if t is not None:
                        t.join(timeout=max(0.0, deadline - time.monotonic()))
                break
            t.join(timeout=0.05)
            store = open_store(store_dir)
        return open_store(store_dir)


_board: Board | None = None
_board_lock = threading.Lock()


def configure(settings: Settings) -> Board:
    """Set the process-wide board (command line and tests); returns it."""
    global _board
    with _board_lock:
        _board = Board(settings)
        return _board


def board() -> Board:
    """The process-wide board, built from the environment on first use."""
    global _board
    with _board_lock:
        if _board is None:
            _board = Board(load_settings())
        return _board


def open_run(
    run: str | None, path: str | None = None, wait: float = 10.0, on: Board | None = None
) -> RunContext:
    """The one way from a URL's ``run`` to what a page shows: the run page ``path`` shows for it (see
    :func:`data.views.paths.shown_run`; ``path`` None: ``run`` as it is), with its unknown-run notice, its
    committed store (waiting up to ``wait`` seconds for a first ingest) and its steps. ``on``: the board
    (default the process's)."""
    return (on or board()).open_run(run, path, wait)
