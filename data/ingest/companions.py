"""Companion files (:class:`data.schema.dialects.base.Companion`): a file beside a rollout file that adds fields
to its lines, joined by a key (miles' per-token Parquet beside its trajectory lines). Read whole, within the
read limits, each time its rollout file is read; a companion that changed (come, gone, rewritten) makes its
rollout file read again from its start, so that every line is joined to the companion as it is now. What was
joined and what could not be is kept in the file's manifest entry (``companion``) and said on the runs page."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from data import schema, untrusted
from data.config import ReadLimits
from data.ingest.parquet import read_bounded
from data.schema.dialects.base import Joined

COMPANION = "companion"  # the key of a rollout file's manifest entry that says what its companion gave
# A run's other file is kept for the rest of the ingest up to this size (the indexes every rollout file's
# companion looks at); a bigger one (an annotation stream's chunk) is read again by each that asks, so that
# an ingest holds one of them at a time, not every one.
KEEP_BYTES = 64 << 20


def spec(entry: dict) -> schema.Companion | None:
    """The companion a file's dialect (as its manifest entry records it) gives its files, or None."""
    return schema.by_name(entry.get("dialect")).companion if "dialect" in entry else None


class RunFileReader:
    """A run's other files as a dialect reads them (:class:`schema.RunFiles`), within the read limits (a file
    past ``parquet_bytes``, or a ``.zst`` inflating past its cap, is as absent, and ``refused`` says why);
    those up to :data:`KEEP_BYTES` read once per ingest of the run and kept."""

    def __init__(self, run_dir: Path, limits: ReadLimits):
        self.run_dir, self.limits = run_dir, limits
        self._bytes: dict[str, bytes | None] = {}
        self.refused: dict[str, str] = {}

    def read(self, rel: str) -> bytes | None:
        if rel in self._bytes:
            return self._bytes[rel]
        got = self._read(rel)
        if (
            got is None or len(got) <= KEEP_BYTES
        ):  # an index, a small stream; a big one is read again if asked
            self._bytes[rel] = got
        return got

    def _read(self, rel: str) -> bytes | None:
        path = self.run_dir / rel
        try:
            raw = untrusted.read_bounded(path, self.limits.parquet_bytes, self.run_dir, rel)
        except FileNotFoundError:
            return None
        except (OSError, untrusted.Refused) as e:
            self.refused[rel] = str(e)[:200]
            return None
        if not rel.endswith(".zst"):
            return raw
        import zstandard

        cap = self.limits.inflate_cap(len(raw))
        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as f:
            try:
                out = f.read(cap + 1)
            except zstandard.ZstdError as e:
                self.refused[rel] = f"not decompressed: {e}"
                return None
        if len(out) > cap:
            self.refused[rel] = f"inflates past {cap:,} bytes ({ReadLimits.NAMES['inflated_bytes']})"
            return None
        return out

    def listdir(self, rel: str) -> list[str]:
        folder = self.run_dir / rel
        try:
            names = sorted(e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
        except OSError:
            return []
        return [f"{rel}/{n}" for n in names]

    def size(self, rel: str) -> int | None:
        try:
            return (self.run_dir / rel).stat().st_size
        except OSError:
            return None

    def files(self) -> schema.RunFiles:
        return schema.RunFiles(read=self.read, listdir=self.listdir, size=self.size)


def _reader(reading: schema.Reading, run_dir: Path, limits: ReadLimits) -> RunFileReader:
    """The run's file reader of this ingest (one per reading: a reading is made for each ingest)."""
    if not isinstance(reading.run_files, RunFileReader):
        reading.run_files = RunFileReader(run_dir, limits)
    return reading.run_files


def _signature(c: schema.Companion, files: RunFileReader, rel: str, other: str):
    """What tells a companion changed: the dialect's signature, else its file's size and time (None: none)."""
    if c.signature is not None:
        return c.signature(files.files(), rel)
    try:
        st = (files.run_dir / other).stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def changed(reading: schema.Reading, run_dir: Path, rel: str, entry: dict, limits: ReadLimits) -> bool:
    """Whether the companion of the rollout file ``rel`` (its manifest ``entry`` as last read) is not the
    one its lines were joined to: come, gone or changed since."""
    c = spec(entry)
    if c is None or (other := c.path(rel)) is None:
        return False
    files, info = _reader(reading, run_dir, limits), entry.get(COMPANION) or {}
    stamp = None if c.stamp is None else _json(c.stamp(files.files(), rel))
    if stamp is not None and stamp == info.get("stamp"):
        return False  # nothing its signature is made of has changed: not computed
    now = _json(_signature(c, files, rel, other))
    if now == info.get("sig") and COMPANION in entry:
        entry[COMPANION]["stamp"] = stamp  # others' companions changed, not this one's: cheap next time
        return False
    return True


def _json(value):
    """A value as the manifest gives it back (JSON: tuples become lists)."""
    return orjson.loads(orjson.dumps(value))


def load(reading: schema.Reading, run_dir: Path, rel: str, entry: dict, limits: ReadLimits) -> None:
    """Read the companion of the rollout file ``rel`` (if its dialect gives one) into ``reading.companions``
    and record in ``entry`` what it is: ``{"file", "sig", "rows", "joined", "problem"}`` (``joined``: the
    lines joined so far, counted by :func:`count_joined`; ``problem``: why none could be joined)."""
    c = spec(entry)
    if c is None or (other := c.path(rel)) is None:
        return
    files = _reader(reading, run_dir, limits)
    info = entry.setdefault(COMPANION, {"joined": 0})
    stamp = None if c.stamp is None else _json(c.stamp(files.files(), rel))
    info.update(file=other, sig=_json(_signature(c, files, rel, other)), stamp=stamp, rows=0, problem=None)
    if c.gather is not None:
        try:
            rows = c.gather(files.files(), rel)
        except Exception as e:  # noqa: BLE001 - records of another shape than the trainer writes
            info["problem"] = f"not read: {type(e).__name__}: {str(e)[:160]}"
            return
        if files.refused:
            info["problem"] = "partly read: " + "; ".join(
                f"{k}: {v}" for k, v in list(files.refused.items())[:2]
            )
        info["rows"] = len(rows)
        reading.companions[rel] = Joined(other, rows)
        return
    path = run_dir / other
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
        rows = c.table(frame) if c.table is not None else {}
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
            info["asked"] = info.get("asked", 0) + len(joined.asked)


def notes(files: dict, shown: int = 3) -> list[str]:
    """The runs page's notes on the run's companions: per dialect's companion, how many lines were joined
    and how many of its rows found no line; then the files whose companion is absent or was not read."""
    joined, asked, rows, files_with, spare, missing = 0, 0, 0, 0, [], []
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
        asked += info.get("asked", 0)
        rows += info.get("rows", 0)
        if info.get("rows", 0) > info.get("joined", 0):
            spare.append(f"{info['file']}: {info['rows'] - info['joined']:,} of {info['rows']:,}")
    out = []
    if files_with:
        text = (
            f"Joined {joined:,} of {asked:,} lines' keys in {files_with:,} files to their companions ({what})"
        )
        if spare:
            more = f"; and {len(spare) - shown:,} more" if len(spare) > shown else ""
            text += f"; rows of a companion with no line: {'; '.join(spare[:shown])}{more}"
        out.append(text + ".")
    if missing:
        more = f"; and {len(missing) - shown:,} more" if len(missing) > shown else ""
        out.append(f"Read without their companion's fields: {'; '.join(missing[:shown])}{more}.")
    return out
