"""Companion files (:class:`data.schema.dialects.base.Companion`): a file beside a rollout file that adds fields
to its lines, joined by a key (miles' per-token Parquet beside its trajectory lines). Read whole, within the
read limits, each time its rollout file is read; a companion that changed (come, gone, rewritten) makes its
rollout file read again from its start, so that every line is joined to the companion as it is now. What was
joined and what could not be is kept in the file's manifest entry (``companion``) and said on the runs page."""

from __future__ import annotations

from pathlib import Path

from data import schema, untrusted
from data.config import ReadLimits
from data.ingest.parquet import read_bounded
from data.schema.dialects.base import Joined

COMPANION = "companion"  # the key of a rollout file's manifest entry that says what its companion gave


def spec(entry: dict) -> schema.Companion | None:
    """The companion a file's dialect (as its manifest entry records it) gives its files, or None."""
    return schema.by_name(entry.get("dialect")).companion if "dialect" in entry else None


def _signature(path: Path) -> list | None:
    """What tells a companion changed: its size and modification time; None where there is none."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def changed(run_dir: Path, rel: str, entry: dict) -> bool:
    """Whether the companion of the rollout file ``rel`` (its manifest ``entry`` as last read) is not the
    one its lines were joined to: come, gone or rewritten since."""
    c = spec(entry)
    if c is None:
        return False
    other = c.path(rel)
    now = None if other is None else _signature(run_dir / other)
    return now != (entry.get(COMPANION) or {}).get("sig")


def load(reading: schema.Reading, run_dir: Path, rel: str, entry: dict, limits: ReadLimits) -> None:
    """Read the companion of the rollout file ``rel`` (if its dialect gives one) into ``reading.companions``
    and record in ``entry`` what it is: ``{"file", "sig", "rows", "joined", "problem"}`` (``joined``: the
    lines joined so far, counted by :func:`count_joined`; ``problem``: why none could be joined)."""
    c = spec(entry)
    if c is None or (other := c.path(rel)) is None:
        return
    path = run_dir / other
    info = entry.setdefault(COMPANION, {"joined": 0})
    info.update(file=other, sig=_signature(path), rows=0, problem=None)
    if info["sig"] is None:
        info["problem"] = "absent"
        return
    ok, why = untrusted.inside(path, run_dir)
    if not ok:
        info["problem"] = f"not read: it is {why}"
        return
    try:
        frame, decoded = read_bounded(path, limits.parquet_bytes)
    except Exception as e:  # noqa: BLE001 - a damaged companion: its lines are read without it, and say so
        info["problem"] = f"not read: {type(e).__name__}: {str(e)[:160]}"
        return
    if frame is None:
        info["problem"] = (
            f"not read: it decodes to {decoded:,} bytes or more, over the limit of {limits.parquet_bytes:,} "
            f"({ReadLimits.NAMES['parquet_bytes']})"
        )
        return
    try:
        rows = c.table(frame)
    except Exception as e:  # noqa: BLE001 - columns of another shape than the trainer writes
        info["problem"] = f"not read: {type(e).__name__}: {str(e)[:160]}"
        return
    info["rows"] = len(rows)
    reading.companions[rel] = Joined(other, rows)


def count_joined(reading: schema.Reading, files: dict) -> None:
    """Add to each rollout file's ``companion`` entry the lines of it joined during this read."""
    for rel, joined in reading.companions.items():
        info = (files.get(rel) or {}).get(COMPANION)
        if info is not None:
            info["joined"] = info.get("joined", 0) + len(joined.used)


def notes(files: dict, shown: int = 3) -> list[str]:
    """The runs page's notes on the run's companions: per dialect's companion, how many lines were joined
    and how many of its rows found no line; then the files whose companion is absent or was not read."""
    joined, rows, files_with, spare, missing = 0, 0, 0, [], []
    what = ""
    for rel in sorted(files):
        info = (files[rel] or {}).get(COMPANION)
        if info is None:
            continue
        c = spec(files[rel])
        what = c.what if c is not None else what
        if info.get("problem"):
            missing.append(f"{rel} ({info['file']}: {info['problem']})")
            continue
        files_with += 1
        joined += info.get("joined", 0)
        rows += info.get("rows", 0)
        if info.get("rows", 0) > info.get("joined", 0):
            spare.append(f"{info['file']}: {info['rows'] - info['joined']:,} of {info['rows']:,}")
    out = []
    if files_with:
        text = f"Joined {joined:,} lines of {files_with:,} files to their companions ({what})"
        if spare:
            more = f"; and {len(spare) - shown:,} more" if len(spare) > shown else ""
            text += f"; rows of a companion with no line: {'; '.join(spare[:shown])}{more}"
        out.append(text + ".")
    if missing:
        more = f"; and {len(missing) - shown:,} more" if len(missing) > shown else ""
        out.append(f"Read without their companion's fields: {'; '.join(missing[:shown])}{more}.")
    return out
