"""The manifest of a store (what it holds: per source file its size, mtime, offset, line count and parts),
written atomically and last, so that readers only ever see a committed state; and the removal of the
stores an older format left."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
from filelock import FileLock, Timeout

from data.store.layout import ROW_GROUP_SIZE, STORE_FORMAT

MANIFEST = "manifest.json"
# The format of the store an older version wrote of the run, which this one replaced (said on the runs page).
REBUILT_FROM = "rebuilt_from"


@dataclass
class Manifest:
    """What the store holds: per source file its size, mtime, offset, line count and parts."""

    data: dict

    @classmethod
    def empty(cls, run: str, run_path: str, pad_tokens: tuple[str, ...]) -> Manifest:
        return cls(
            {
                "format": STORE_FORMAT,
                "run": run,
                "run_path": run_path,
                "pad_tokens": list(pad_tokens),
                "generation": 0,
                "next_part": 1,
                "files": {},
                "parts": {},
                "ignored_fields": [],
                "pending": {},
                "steps_file": None,
                "row_group_size": ROW_GROUP_SIZE,
                "updated": None,
            }
        )

    @property
    def generation(self) -> int:
        return self.data["generation"]


def read_manifest(store_dir: Path) -> Manifest | None:
    """The manifest of the store in ``store_dir``; None when there is none, or it is of another
    ``STORE_FORMAT`` (a cache of an older version: rebuilt from the rollout files, never read)."""
    try:
        data = orjson.loads((store_dir / MANIFEST).read_bytes())
    except (FileNotFoundError, NotADirectoryError):  # no store (yet), or no cache folder to hold one
        return None
    return Manifest(data) if of_this_format(data) else None


def of_this_format(data) -> bool:
    """Whether a manifest's ``data`` is of this version's ``STORE_FORMAT`` (no other is read)."""
    return isinstance(data, dict) and data.get("format") == STORE_FORMAT


def manifest_bytes(data: dict) -> bytes:
    """A manifest's ``data`` as its file holds it: compact JSON. Every check of a run (every few seconds
    while its pages are open) parses it, and a reader once per commit; indented, it was four times larger
    (1.7 MB at 2.56M responses, most of it the parts' per-step lists)."""
    return orjson.dumps(data)


@contextmanager
def replaced(path: Path, sync: bool = True) -> Iterator[Path]:
    """A path beside ``path`` (this process's and thread's) to write the new file to; once the block ends
    without error it replaces ``path`` (after an fsync when ``sync``), so that readers see the old or the new
    file, never a mix. On an error the partial file is removed and ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        if sync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old or the new file, never a mix."""
    with replaced(path) as tmp:
        tmp.write_bytes(payload)


def commit_manifest(store_dir: Path, manifest: Manifest) -> None:
    manifest.data["updated"] = time.time()
    write_atomic(store_dir / MANIFEST, manifest_bytes(manifest.data))


def packed_parts(packs: list[dict]) -> set[int]:
    """The ids of the parts whose scalars and issues are read from ``packs`` (a manifest's list)."""
    return {i for p in packs for i in p["parts"]}


def has_issues(entry: dict) -> bool:
    """Whether a part's manifest entry says it recorded an issue."""
    return bool(entry.get("errors") or entry.get("notes"))


def older_stores(store_dir: Path, run_path: str, pad_tokens: list[str]) -> list[tuple[Path, int]]:
    """The stores an older version of the app made of the same run with the same pad tokens, beside
    ``store_dir`` (a store's folder name hashes its ``STORE_FORMAT``), each with its format."""
    out = []
    try:
        others = list(store_dir.parent.iterdir())
    except OSError:
        return []
    for other in others:
        if other == store_dir or not other.is_dir():
            continue
        try:
            data = orjson.loads((other / MANIFEST).read_bytes())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        fmt = data.get("format")
        if (
            isinstance(fmt, int)
            and fmt < STORE_FORMAT
            and data.get("run_path") == run_path
            and data.get("pad_tokens") == list(pad_tokens)
        ):
            out.append((other, fmt))
    return out


def remove_older_formats(store_dir: Path, manifest: Manifest) -> int | None:
    """Delete the stores an older version of the app made of the same run with the same pad tokens (a new
    ``STORE_FORMAT`` makes a new store, rebuilt from the rollout files; the old one would only take disk
    space). A store whose lock is held is left alone. Returns the newest older format found (None: none)."""
    older = older_stores(store_dir, manifest.data["run_path"], manifest.data["pad_tokens"])
    for other, _ in older:
        lock = FileLock(str(other / ".lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        try:
            # (Format 13 and before could keep a text index beside the store, <store>.text-index.)
            shutil.rmtree(other.parent / f"{other.name}.text-index", ignore_errors=True)
            shutil.rmtree(other, ignore_errors=True)
        finally:
            lock.release()
    return max((fmt for _, fmt in older), default=None)
