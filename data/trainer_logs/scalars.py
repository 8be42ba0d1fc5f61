"""A run's trainer scalars: every log found (see :mod:`data.trainer_logs.find`) merged into one long
table, listed key by key, and lined up with the rollout steps. Cached per process on the files' sizes and
modification times (a trainer that writes on is read again). TensorBoard event files are read in the
background, never in a request (see :func:`trainer_scalars`): until they are, the run's scalars say they
are still being read."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data.remote import as_path
from data.trainer_logs.find import MAX_EVENTS_BYTES, MAX_JSON_BYTES, LogFile, find_logs
from data.trainer_logs.read import Rows, read_events, read_history

SCHEMA = {"key": pl.String, "step": pl.Int64, "value": pl.Float64, "source": pl.String}
SCHEMA_ROWS = {k: v for k, v in SCHEMA.items() if k != "source"}


@dataclass(frozen=True)
class TrainerScalars:
    """The trainer's own scalars of one run.

    ``frame``: ``key, step, value, source``, one row per (key, step), sorted by key then step; when two
    logs give the same key at the same step, the later of :func:`~data.trainer_logs.find.find_logs`'s
    order wins. ``summary``: the final summary log (``train_runtime``, ``train_loss``, …). ``files``: the
    logs found, read or not; ``notes``: what was left out and why; ``reading``: the TensorBoard folders
    still being read in the background (their scalars are not in ``frame`` yet; a note says so).
    """

    frame: pl.DataFrame
    summary: dict
    files: tuple[LogFile, ...]
    notes: tuple[str, ...]
    reading: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return self.frame.height == 0

    def keys(self) -> list[str]:
        """Every key, sorted."""
        return self.frame.get_column("key").unique().sort().to_list()

    def series(self, key: str) -> pl.DataFrame:
        """``step, value`` of one key, sorted by step (empty for an unknown key)."""
        return self.frame.filter(pl.col("key") == key).select("step", "value")

    def catalog(self) -> pl.DataFrame:
        """One row per key: ``key, source, points, first_step, last_step, last_value`` (the value at the
        key's last step), sorted by key."""
        if self.empty:
            return pl.DataFrame(
                schema={
                    "key": pl.String,
                    "source": pl.String,
                    "points": pl.UInt32,
                    "first_step": pl.Int64,
                    "last_step": pl.Int64,
                    "last_value": pl.Float64,
                }
            )
        return (
            self.frame.group_by("key")
            .agg(
                pl.col("source").last(),
                pl.len().alias("points"),
                pl.col("step").min().alias("first_step"),
                pl.col("step").max().alias("last_step"),
                pl.col("value").sort_by("step").last().alias("last_value"),
            )
            .sort("key")
        )


def merge(parts: list[tuple[str, Rows]]) -> pl.DataFrame:
    """The long frame of :class:`TrainerScalars` from each log's rows in merge order."""
    frames = [
        (
            pl.DataFrame({"key": r.keys, "step": r.steps, "value": r.values}, schema=SCHEMA_ROWS)
            if r.frame is None
            else r.frame.cast(SCHEMA_ROWS)
        ).with_columns(pl.lit(rel).alias("source"))
        for rel, r in parts
        if r.keys or (r.frame is not None and r.frame.height)
    ]
    if not frames:
        return pl.DataFrame(schema=SCHEMA)
    # The last row of each (key, step) in merge order: sorted by both and the order, the row whose next row
    # is another (key, step). (A unique(keep="last") held twice the memory: +330 MB for 1.7M points.)
    df = pl.concat(frames).with_row_index("__order").sort("key", "step", "__order")
    last = (pl.col("key") != pl.col("key").shift(-1)) | (pl.col("step") != pl.col("step").shift(-1))
    return df.filter(last.fill_null(True)).drop("__order")


def _events_now(f: LogFile) -> Rows:
    return read_events(f.path, f.rel, [name for name, _, _ in f.stamp[1:]])


def read_logs(files: list[LogFile], events: Callable[[LogFile], Rows | None] = _events_now) -> TrainerScalars:
    """Read and merge ``files`` (no cache). ``events`` reads a TensorBoard folder's rows, or answers None
    while they are being read elsewhere (the folder is then listed in ``reading``, with a note)."""
    parts: list[tuple[str, Rows]] = []
    notes: list[str] = []
    summary: dict = {}
    reading: list[str] = []
    for f in files:
        if f.kind == "tensorboard":
            if f.size > MAX_EVENTS_BYTES:
                notes.append(f"{f.rel}: event files of {f.size >> 20} MB not read (the limit is "
                             f"{MAX_EVENTS_BYTES >> 20} MB).")  # fmt: skip
                continue
            rows = events(f)
            if rows is None:
                reading.append(f.rel)
                notes.append(f"{f.rel}: still reading its TensorBoard events ({_mb(f.size)}) in the "
                             "background; reload the page in a moment.")  # fmt: skip
                continue
        else:
            if f.size > MAX_JSON_BYTES:
                notes.append(f"{f.rel}: {f.size >> 20} MB not read (the limit is {MAX_JSON_BYTES >> 20} MB).")
                continue
            rows = read_history(f.path, f.rel)
        parts.append((f.rel, rows))
        summary.update(rows.summary)
        notes += rows.notes
    return TrainerScalars(merge(parts), summary, tuple(files), tuple(notes), tuple(reading))


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 1 << 20 else f"{size:,} bytes"


_CACHE: OrderedDict[tuple, TrainerScalars] = OrderedDict()
_LOCK = threading.Lock()
_MAX_CACHED = 16
# TensorBoard folders read in the background, one at a time in a process (each within its read limit):
# the rows of those read, by path and stamp, and those being read.
_EVENTS: OrderedDict[tuple, Rows] = OrderedDict()
_PENDING: set[tuple] = set()
_QUEUE: queue.Queue[Callable[[], None]] = queue.Queue()
_READER: list[threading.Thread] = []  # the reader thread, once started (a daemon: never waited for on exit)


def _in_background(fn: Callable[[], None]) -> None:
    with _LOCK:
        if not _READER or not _READER[-1].is_alive():  # (also in a worker forked after one was started)
            _READER[:] = [threading.Thread(target=_reader, name="tensorboard-reader", daemon=True)]
            _READER[0].start()
    _QUEUE.put(fn)


def _reader() -> None:
    while True:
        _QUEUE.get()()


def _events_later(f: LogFile) -> Rows | None:
    """The rows of TensorBoard folder ``f`` when read already, else None, its read started in the
    background (never in the request that asks)."""
    key = (str(f.path), f.stamp)
    with _LOCK:
        if key in _EVENTS:
            _EVENTS.move_to_end(key)
            return _EVENTS[key]
        if key in _PENDING:
            return None
        _PENDING.add(key)

    def read() -> None:
        try:
            rows = _events_now(f)
        except Exception as e:  # noqa: BLE001 - an event file that cannot be read is a note, never a crash
            rows = Rows(notes=[f"{f.rel}: TensorBoard events not read ({type(e).__name__}: {e})."])
        with _LOCK:
            _EVENTS[key] = rows
            _PENDING.discard(key)
            while len(_EVENTS) > _MAX_CACHED:
                _EVENTS.popitem(last=False)

    _in_background(read)
    return None


def trainer_scalars(run_dir: Path) -> TrainerScalars:
    """The trainer scalars of the run in ``run_dir`` (a folder the board found under its root), read
    again only when a log file changed (size or modification time) or appeared. Its TensorBoard event
    files are read in the background: until they are, the answer lists them in ``reading`` (and is not
    kept)."""
    files = find_logs(as_path(run_dir))
    key = (str(run_dir), tuple((f.kind, f.stamp) for f in files))
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    out = read_logs(files, _events_later)
    if out.reading:
        return out
    with _LOCK:
        _CACHE[key] = out
        while len(_CACHE) > _MAX_CACHED:
            _CACHE.popitem(last=False)
    return out


def wait_for_events(timeout: float | None = None) -> None:
    """Wait until the TensorBoard folders asked for so far are read (tests, benchmarks)."""
    done = threading.Event()
    _in_background(done.set)
    if not done.wait(timeout):
        raise TimeoutError(f"TensorBoard events still being read after {timeout} s")


@dataclass(frozen=True)
class Alignment:
    """How the trainer's steps line up with the rollout steps: ``shared`` steps in both, ``trainer_only``
    (logged, no rollouts) and ``rollouts_only`` (rollouts, nothing logged), each sorted."""

    shared: tuple[int, ...]
    trainer_only: tuple[int, ...]
    rollouts_only: tuple[int, ...]

    def notes(self) -> list[str]:
        """What does not line up, in words ([] when every step is in both)."""
        out = []
        if not self.shared and (self.trainer_only or self.rollouts_only):
            out.append("No step of the trainer's logs is a rollout step: the two cannot be lined up.")
        if self.shared and self.trainer_only:
            out.append(
                f"{len(self.trainer_only)} logged steps have no rollouts ({_span(self.trainer_only)})."
            )
        if self.shared and self.rollouts_only:
            out.append(
                f"{len(self.rollouts_only)} rollout steps have no trainer log ({_span(self.rollouts_only)})."
            )
        return out


def _span(steps: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, steps[:5]))
    return shown + (f", … {steps[-1]}" if len(steps) > 5 else "")


def align(scalars: TrainerScalars, rollout_steps: list[int]) -> Alignment:
    """:class:`Alignment` of the trainer's logged steps (any key) with ``rollout_steps``: both are the
    global training step (TRL's rollouts of step ``s`` and its log at ``step == s`` describe one batch)."""
    logged = set(scalars.frame.get_column("step").to_list()) if not scalars.empty else set()
    rollouts = set(rollout_steps)
    return Alignment(
        tuple(sorted(logged & rollouts)), tuple(sorted(logged - rollouts)), tuple(sorted(rollouts - logged))
    )


def aligned(scalars: TrainerScalars, key: str, rollout_steps: list[int]) -> pl.DataFrame:
    """``step, value`` of ``key`` at the rollout steps only (a left join on the rollout steps, so a step
    the trainer did not log has a null value), sorted by step."""
    steps = pl.DataFrame({"step": sorted(set(rollout_steps))}, schema={"step": pl.Int64})
    return steps.join(scalars.series(key), on="step", how="left").sort("step")
