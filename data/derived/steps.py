"""The per-step summary of a store kept up to date while ingest writes parts: at each commit only the steps
that gained or lost rows since the last one are summarised again, from the scalars of the parts that hold
them. Ingest so holds no whole-run table: its memory stays flat as the run grows.

A step's summary depends only on that step's rows (see :func:`data.metrics.step.step_summary`), so the
summary of a run read in pieces is the summary of the run read at once. Each part's manifest entry names the
range of steps it holds (``"steps": [first, last]``), which also gives each file's last step (the
watermark of a commit made mid-read, see ``_Writer._watermark``) without reading any row.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from data.derived.base import Commit, collect_named
from data.derived.cells import CELLS_KEY, COLUMNS, empty_cells, hist_cells, made_with, widths
from data.metrics.step import extra_mean, step_summary, step_summary_by_columns
from data.store.layout import SCALAR_CORE, SCALAR_DTYPES, entry_name
from data.store.manifest import packed_parts

# The scalars a step's summary reads: the numbers, the prompt key and the group id (never the previews); and
# the run's numeric extra columns (their finite means, see data.metrics.step.extra_mean).
# Rows a commit summarises at once (see StepSummaries.refresh): ~650 bytes each in memory.
REFRESH_ROWS = 100_000

# Of the string columns, the prompt key (groups), the repetition's unit, and where a step's largest-KL
# response is (source, sample_id: see data.metrics.step.KL_TOP_COLUMNS).
SUMMARY_INPUT = tuple(
    c
    for c in SCALAR_CORE
    if SCALAR_DTYPES[c] != pl.String() or c in ("prompt_key", "source", "sample_id", "repetition_unit")
) + ("group_id",)


def scan_part_scalars(store_dir: Path, data: dict, pids: Iterable[int]) -> list[pl.LazyFrame]:
    """Lazy scans of the scalars of parts ``pids`` (those with rows) of a manifest's ``data``: each loose
    part's own file, and the packs holding the others, filtered to them."""
    parts = data["parts"]
    wanted = {p for p in pids if parts[str(p)]["rows"]}
    packs = data.get("packs", [])
    packed = packed_parts(packs)
    scans = []
    for pack in packs:
        keep = wanted.intersection(pack["parts"])
        if keep:
            scan = pl.scan_parquet(Path(store_dir) / "scalars" / pack["name"])
            scans.append(scan.filter(pl.col("part").is_in(sorted(keep))))
    scans += [
        pl.scan_parquet(Path(store_dir) / "scalars" / entry_name(i, parts[str(i)]))
        for i in sorted(wanted - packed)
    ]
    return scans


def empty_summary() -> pl.DataFrame:
    """The summary of no response: every column, no row."""
    return step_summary(pl.DataFrame(schema=SCALAR_DTYPES).lazy()).collect()


class StepSummaries:
    """The summary of every step of a store's applied parts (hidden steps included), summarised again
    where rows came or went (:meth:`touch`, :meth:`touch_range`) when asked for (:meth:`refresh`); and the
    steps' histogram cells (:attr:`cells`, see :mod:`data.derived.cells`), made from the same rows."""

    def __init__(self, store_dir: Path, data: dict):
        self.dir = Path(store_dir)
        # The committed summary and cells are read at their first use, not here: a check of a run that
        # finds nothing new (every few seconds while pages are open) commits nothing and needs neither.
        self._steps_file = data.get("steps_file")
        self._cells_file = data.get(CELLS_KEY)
        self._frame: pl.DataFrame | None = None
        self._cells: pl.DataFrame | None = None
        self._steps: set[int] = set()
        self._ranges: list[tuple[int, int]] = []
        # The committed summary leaves out the steps a commit hid (from ``visible_below`` on): summarised
        # again at the first refresh.
        self._from: int | None = data.get("visible_below") if self._steps_file else None

    @property
    def frame(self) -> pl.DataFrame:
        """The summary of every step as last committed or refreshed."""
        if self._frame is None:
            f = self._steps_file
            self._frame = pl.read_parquet(self.dir / f) if f else empty_summary()
        return self._frame

    @frame.setter
    def frame(self, value: pl.DataFrame) -> None:
        self._frame = value

    @property
    def cells(self) -> pl.DataFrame:
        """The steps' histogram cells as last committed or refreshed."""
        if self._cells is None:
            f = self._cells_file
            self._cells = pl.read_parquet(self.dir / f) if f else empty_cells()
        return self._cells

    @cells.setter
    def cells(self, value: pl.DataFrame) -> None:
        self._cells = value

    def touch(self, steps: Iterable[int]) -> None:
        """Rows of these steps came (a part applied)."""
        self._steps.update(steps)

    def touch_range(self, lo: int, hi: int) -> None:
        """Rows of some steps from ``lo`` to ``hi`` went (a file dropped) or came."""
        self._ranges.append((lo, hi))

    def _stale(self) -> pl.Expr | None:
        """True for the rows of a step to summarise again (None: none)."""
        cond = []
        if self._steps:
            cond.append(pl.col("step").is_in(sorted(self._steps)))
        cond += [pl.col("step").is_between(lo, hi) for lo, hi in self._ranges]
        if self._from is not None:
            cond.append(pl.col("step") >= self._from)
        return pl.any_horizontal(cond) if cond else None

    def _holds_stale(self, lo: int, hi: int, steps: list[int]) -> bool:
        """Whether a part of steps ``lo`` to ``hi`` may hold rows of a stale step (``steps``: sorted)."""
        if self._from is not None and hi >= self._from:
            return True
        if any(a <= hi and lo <= b for a, b in self._ranges):
            return True
        i = bisect.bisect_left(steps, lo)
        return i < len(steps) and steps[i] <= hi

    def refresh(self, data: dict) -> pl.DataFrame:
        """The summary of every step of ``data``'s parts (sorted by step), the stale steps summarised again
        from the rows the parts hold now (a step left with none drops out).

        The stale steps are read a window of steps at a time (about :data:`REFRESH_ROWS` rows each, see
        :func:`step_windows`): a commit made after a long read (commits space themselves by their cost,
        which load can stretch to minutes) would otherwise hold every row read since the last one."""
        stale = self._stale()
        if stale is None:
            return self.frame
        steps = sorted(self._steps)
        held = [
            (int(k), e)
            for k, e in data["parts"].items()
            if e["rows"] and self._holds_stale(*e["steps"], steps)
        ]
        fresh, cell_rows = [], []
        extras = [c for c in data.get("extra_columns", ()) if c not in SUMMARY_INPUT]
        if held:
            # The columns of every part together (as one concat of them all has them), for each window; of
            # the extra columns, the numeric ones (as a reader's scan of the run types them).
            schemas = [s.collect_schema() for s in scan_part_scalars(self.dir, data, [p for p, _ in held])]
            want = set(SUMMARY_INPUT).union(extras)
            union = pl.concat(
                [pl.LazyFrame(schema={c: t for c, t in sc.items() if c in want}) for sc in schemas],
                how="diagonal_relaxed",
            ).collect_schema()
            extras = [c for c in extras if c in union and union[c].is_numeric() and union[c] != pl.Boolean]
            union = pl.Schema({c: t for c, t in union.items() if c in SUMMARY_INPUT or c in extras})
            ranges = [(e["steps"][0], e["steps"][1], e["rows"]) for _, e in held]
            for lo, hi in step_windows(ranges, REFRESH_ROWS):
                pids = [p for (p, _), (a, b, _) in zip(held, ranges, strict=True) if a <= hi and lo <= b]
                scans = scan_part_scalars(self.dir, data, pids)
                if not scans:
                    continue
                read = _window_reader(scans, stale & pl.col("step").is_between(lo, hi), union)
                if _rows_in(ranges, lo, hi) > 2 * REFRESH_ROWS:
                    # A step too large for a window (one step of 3M responses): a few columns at a time.
                    summary = step_summary_by_columns(read, extras)
                    if summary.height:
                        fresh.append(summary)
                        cell_rows.append(read(["step", *COLUMNS], fill=False))
                    continue
                rows = read(list(union), fill=False)
                if rows.height == 0:
                    continue
                absent = [pl.lit(None, t).alias(c) for c, t in SCALAR_DTYPES.items() if c not in rows.columns]
                summary = step_summary(rows.with_columns(absent).lazy(), extras)
                fresh.append(summary.collect(engine="in-memory"))
                # What the histogram cells read of the window: a few numbers a row, not the whole window.
                cell_rows.append(rows.select(c for c in ("step", *COLUMNS) if c in rows.columns))
                del rows
        if not fresh:
            fresh = [empty_summary()]
        kept = self.frame.filter(~stale)
        if kept.height == 0:  # none kept (its columns may be an older summary's): the current columns
            kept = empty_summary()
        # The extra columns' means in the run's order of them (a later commit may bring one the kept lack).
        frame = pl.concat([kept, *fresh], how="diagonal_relaxed").sort("step")
        means = [extra_mean(c) for c in data.get("extra_columns", ())]
        own = [c for c in frame.columns if c not in means]
        self.frame = frame.select(own + [m for m in means if m in frame.columns])
        # The cells: of the stale steps from their rows, or of every step when the run's bar width moved.
        width = widths(self.frame)
        made = made_with(self.cells)
        if any(made[c] != width.get(c) for c in made):
            self._make_all_cells(data, width)
        else:
            cells = (
                hist_cells(pl.concat(cell_rows, how="diagonal_relaxed"), width)
                if cell_rows
                else empty_cells()
            )
            self.cells = pl.concat([self.cells.filter(~stale), cells]).sort("step", "col", "lo")
        self._steps, self._ranges, self._from = set(), [], None
        return self.frame

    def _make_all_cells(self, data: dict, width: dict[str, float | None]) -> None:
        """The cells of every step made again from the parts (the run's bar width moved)."""
        pids = [int(k) for k, e in data["parts"].items() if e["rows"]]
        scans = scan_part_scalars(self.dir, data, pids)
        if not scans:
            self.cells = empty_cells()
            return
        want = ("step", *COLUMNS)
        frames = [s.select(c for c in s.collect_schema().names() if c in want) for s in scans]
        self.cells = hist_cells(pl.concat(frames, how="diagonal_relaxed").collect(), width)


def _window_reader(scans: list[pl.LazyFrame], window: pl.Expr, union: pl.Schema):
    """``read(columns, fill=True)``: ``step`` and ``columns`` of the rows of ``scans`` in ``window`` (those of
    the run's columns ``union``, cast to its types; with ``fill``, a scalar column no part has as nulls),
    in part and row order, as a reader of the whole run has them (sums are then added in the same order,
    to the last bit)."""

    def read(columns, fill: bool = True) -> pl.DataFrame:
        want = [c for c in dict.fromkeys(["step", *columns]) if c in union and c not in ("part", "row")]
        keep = {*want, "part", "row"}
        frames = [s.select(c for c in s.collect_schema().names() if c in keep) for s in scans]
        rows = pl.concat(frames, how="diagonal_relaxed").filter(window).collect()
        rows = rows.select(
            pl.col(c).cast(union[c]) if c in rows.columns else pl.lit(None, union[c]).alias(c)
            for c in ("part", "row", *want)
        )
        rows = rows.sort("part", "row").drop("part", "row")
        if fill:
            absent = [c for c in columns if c not in rows.columns and c in SCALAR_DTYPES]
            rows = rows.with_columns(pl.lit(None, SCALAR_DTYPES[c]).alias(c) for c in absent)
        return rows

    return read


def _rows_in(ranges: list[tuple[int, int, int]], lo: int, hi: int) -> float:
    """About how many rows the parts of ``ranges`` hold from step ``lo`` to ``hi`` (each part's rows
    counted as spread evenly over its steps, as :func:`step_windows` counts them)."""
    return sum(n * (min(b, hi) - max(a, lo) + 1) / (b - a + 1) for a, b, n in ranges if a <= hi and lo <= b)


def step_windows(ranges: list[tuple[int, int, int]], rows: int) -> list[tuple[int, int]]:
    """Consecutive windows of steps ``(lo, hi)`` covering ``ranges`` (``(first step, last step, rows)`` of
    each part), each holding about ``rows`` rows at most, counting a part's rows as spread evenly over its
    steps (a window is at least one step, however many rows that step has)."""
    if not ranges:
        return []
    # Where the density of rows per step changes, and by how much.
    events: dict[int, float] = {}
    # How many parts hold each step, counted apart from the density: a part of few rows over a wide range of
    # steps (one line at step 2^40) has a density below any tolerance, and its steps were skipped silently.
    covers: dict[int, int] = {}
    for lo, hi, n in ranges:
        d = n / (hi - lo + 1)
        events[lo] = events.get(lo, 0.0) + d
        events[hi + 1] = events.get(hi + 1, 0.0) - d
        covers[lo] = covers.get(lo, 0) + 1
        covers[hi + 1] = covers.get(hi + 1, 0) - 1
    bounds = sorted(events)
    out: list[tuple[int, int]] = []
    start, acc, density, cover, held = bounds[0], 0.0, 0.0, 0, False  # held: the window has steps of a part
    for a, b in zip(bounds, bounds[1:], strict=False):
        density += events[a]
        cover += covers[a]
        if cover == 0:  # no part holds these steps: close the window before them
            if held:
                out.append((start, a - 1))
            start, acc, held = b, 0.0, False
            continue
        step = a
        while step < b:
            if step > start and acc + density > rows:  # the next step does not fit: the window ends before it
                out.append((start, step - 1))
                start, acc = step, 0.0
            # (a density that sums to ~0 by rounding while parts still hold the steps: take them all)
            fit = (rows - acc) / density if density > 0 else b - step
            take = min(max(1, int(min(fit, b - step))), b - step)
            acc += take * max(density, 0.0)
            step += take
            held = True
    if held:
        out.append((start, bounds[-1] - 1))
    return out


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """The per-step summary of the state committed (the steps hidden from ``c.below`` left out; no
    response shown: the summary of none, every column), summarised again where rows came or went."""
    steps = c.summaries.refresh(c.draft)
    if c.below is not None:
        steps = steps.filter(pl.col("step") < c.below)
    name = c.file("steps", "parquet")
    c.put_frame(name, steps)
    c.set({"steps_file": name})


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, "steps-g*.parquet", "steps_file")
