"""A run's annotations on an object-storage cache (``--cache-dir s3://bucket/prefix``, issue 38).

An object store has no append, so each change is one object of its own, written once with a conditional
create (``If-None-Match: *``, obstore's ``mode="create"``) and never overwritten:
``<prefix>/annotations/<run's file name>/<nanoseconds since 1970, 20 digits>-<16 random hex>.json``, holding
the one line that the local file (:mod:`data.annotations`) would have taken. Two writers never write the
same key (a key taken is retried under another), so concurrent writers from any number of replicas lose
nothing; keys sort by the writer's clock, and the latest of a key's lines by that order wins.

A reader lists the run's prefix and reads only the objects it has not read yet (each process keeps what
it read), merging every object in key order; an object that arrives late under an earlier key (a slow
writer, another host's clock) is merged in its place. The prefix is listed again at most once per
``refresh`` seconds in a process, and at once after a write of a process of the same host (a local mark file
whose time moves on: a ``stat`` per look). Everything under the bucket is
untrusted: a key not of that form, an object over the size of a line (``max_object``), or one that is
not a line of JSON is skipped and counted; what the run's prefix holds past the size limit (bytes, and
objects: one per :data:`MIN_OBJECT_BYTES` of it) is not read, and writes there are refused.

This module knows objects, not annotations: :mod:`data.annotations` gives it the parser of a line.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

FOLDER = "annotations"
# A key of this module's writers, below the run's prefix: anything else there is skipped and counted.
KEY = re.compile(r"[0-9]{20}-[0-9a-f]{16}\.json")
# A run's prefix holds at most one object per this many bytes of the size limit (32 MiB: 262,144 objects),
# so that the objects a reader lists and fetches are bounded in count as well as in bytes.
MIN_OBJECT_BYTES = 128
# Objects fetched at once (each a GET of its own).
FETCHES = 8
# Attempts at a key no other writer took (two writers drawing the same 64 random bits in one nanosecond).
ATTEMPTS = 3


class Full(ValueError):
    """The run's prefix holds as many bytes or objects as the size limit allows: the write is refused."""


Parse = Callable[[bytes], tuple[tuple, object] | None]
# An object the server did not give (an error other than "no such object"): not kept as read.
AGAIN = object()


@dataclass(frozen=True)
class Merged:
    """A run's objects merged: the latest value of each key (None: removed) in the order of their last
    change, the objects skipped (bad key, too big, not a line, past the limit), and the prefix's total."""

    latest: dict
    skipped: int
    objects: int
    size: int


class Log:
    """One run's prefix as this process last read it: the objects read (key -> parsed line, or None for an
    object skipped), the keys past the limit, when it was listed, and the merge of what it read."""

    def __init__(self, remote, parse: Parse, max_object: int):
        self.remote, self.parse, self.max_object = remote, parse, max_object
        self.read: dict[str, tuple | None] = {}
        self.listed_at = float("-inf")
        self.mark = 0  # the host's write mark as of the last listing
        self.merged = Merged({}, 0, 0, 0)
        self.lock = threading.Lock()

    def look(self, max_bytes: int, refresh: float, force: bool = False, mark: int = 0) -> Merged:
        """The merge of the run's objects, listed again when ``refresh`` seconds have passed, or ``force``,
        or when ``mark`` (the host's :func:`mark_of`, taken before this call) is one it has not seen."""
        with self.lock:
            now = time.monotonic()
            if force or mark > self.mark or now - self.listed_at >= refresh:
                self._update(max_bytes)
                self.listed_at, self.mark = now, max(self.mark, mark)
            return self.merged

    def _update(self, max_bytes: int) -> None:
        from data.remote import _oserror
        from data.remote_keys import Lister

        store, prefix = self.remote._root.store, self.remote.key
        lister = Lister(store, self.remote._root.raw_keys)
        try:
            listed = lister.all(prefix)
        except Exception as e:  # noqa: BLE001 - as the OSError a local read would raise
            raise _oserror(e, self.remote) from None
        bad = len(lister.skipped)
        ours: list[tuple[str, int]] = []
        for o in listed:
            name = o["path"][len(prefix) + 1 :] if prefix else o["path"]
            if KEY.fullmatch(name):
                ours.append((o["path"], int(o.get("size") or 0)))
            else:
                bad += 1
        ours.sort()
        # Bounded as the local file is: in key order, up to the limit's bytes (and one line) and objects.
        kept, total, read_bytes, past = [], 0, 0, 0
        for key, size in ours:
            total += size
            if read_bytes + size > max_bytes + self.max_object or len(kept) > max_bytes // MIN_OBJECT_BYTES:
                past += 1
                continue
            read_bytes += size
            kept.append(key)
        wanted = set(kept) - self.read.keys()
        new = [(k, s) for k, s in ours if k in wanted]
        fetched = self._fetch(new, self.max_object)
        changed = bool(new) or len(kept) != len(self.read)
        again = sum(fetched[k] is AGAIN for k in wanted)
        self.read = {k: self.read[k] if k in self.read else fetched[k] for k in kept}
        self.read = {k: v for k, v in self.read.items() if v is not AGAIN}
        latest = self.merged.latest
        if changed:  # merged again whole, in key order: an object come late takes its place
            latest = {}
            for parsed in self.read.values():
                if parsed is not None:
                    key, value = parsed
                    latest.pop(key, None)  # re-inserted last: the order of the last changes
                    latest[key] = value
        unread = sum(v is None for v in self.read.values())
        self.merged = Merged(latest, bad + past + unread + again, len(ours), total)

    def _fetch(self, keys: list[tuple[str, int]], max_object: int) -> dict[str, object]:
        """The parsed line of each object (None: too big, gone or not a line; :data:`AGAIN`: the server did
        not give it, to be read at the next listing, counted as skipped meanwhile)."""
        import obstore

        store = self.remote._root.store

        def one(item: tuple[str, int]) -> object:
            key, size = item
            if size > max_object:
                return None
            try:
                got = obstore.get(store, key)
                if int(got.meta.get("size") or 0) > max_object:  # replaced since it was listed
                    return None
                data = bytes(got.bytes())
            except Exception as e:  # noqa: BLE001 - gone: skipped; else read again at the next listing
                import obstore.exceptions as ox

                return None if isinstance(e, ox.NotFoundError | FileNotFoundError) else AGAIN
            return self.parse(data.rstrip(b"\n")) if b"\n" not in data.rstrip(b"\n") else None

        if len(keys) <= 1:
            return {k: one((k, s)) for k, s in keys}
        with ThreadPoolExecutor(max_workers=FETCHES, thread_name_prefix="annotations") as pool:
            return dict(zip((k for k, _ in keys), pool.map(one, keys), strict=True))


_LOGS: dict[tuple, Log] = {}
_LOGS_LOCK = threading.Lock()


def log_of(url: str, options: tuple[tuple[str, str], ...], name: str, parse: Parse, max_object: int) -> Log:
    """The log of the run whose local file is named ``name`` under the cache at ``url`` (one per process:
    its client is this process's, as obstore's runtime does not survive a fork; a few runs' logs are kept,
    the oldest dropped)."""
    key = (os.getpid(), url, options, name)
    with _LOGS_LOCK:
        log = _LOGS.pop(key, None)
        if log is None:
            from data.remote import location

            log = Log(location(url, dict(options)) / FOLDER / name, parse, max_object)
        _LOGS[key] = log  # the most recent last
        while len(_LOGS) > 4:
            del _LOGS[next(iter(_LOGS))]
        return log


def mark_of(path: Path) -> int:
    """The write mark of a run on this host (a local file's time in nanoseconds; 0: none): every process
    of the host (gunicorn's workers) looks again at the bucket once it changed, at the cost of a ``stat``."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def marked(path: Path) -> None:
    """Move the run's write mark on (after a write): the host's other processes look at the bucket again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path, ns=(time.time_ns(), max(time.time_ns(), mark_of(path) + 1)))


def put(log: Log, data: bytes, max_bytes: int, refresh: float) -> str:
    """Write ``data`` (one line) as a new object of ``log``'s prefix, refused (:class:`Full`) when the prefix
    holds ``max_bytes`` or its count of objects already. Returns the object's key."""
    import obstore
    import obstore.exceptions as ox

    from data.remote import _oserror

    merged = log.look(max_bytes, refresh, force=True)
    if merged.size + len(data) > max_bytes or merged.objects + 1 > max_bytes // MIN_OBJECT_BYTES:
        raise Full(f"{merged.objects:,} objects, {merged.size:,} bytes")
    for _ in range(ATTEMPTS):
        key = f"{log.remote.key}/{time.time_ns():020d}-{secrets.token_hex(8)}.json"
        try:
            obstore.put(log.remote._root.store, key, data, mode="create")
        except ox.AlreadyExistsError:
            continue
        except Exception as e:  # noqa: BLE001
            raise _oserror(e, log.remote / key.rsplit("/", 1)[-1]) from None
        log.listed_at = float("-inf")  # this process sees its own write at its next look
        return key
    raise OSError(f"no free key under {log.remote} after {ATTEMPTS} attempts")
