"""Run stores shared on object storage (``--cache-dir s3://bucket/prefix``) by replicas on several hosts.

Each process keeps a local working copy of a store (a plain store folder, read by :class:`RunStore` as any
other) and the bucket holds the committed history, per store folder ``<prefix>/<store>/``:

- ``_objects/<generation>-<writer>/<path>``: every file the store folder held when it was committed (parts,
  packs, steps summaries, whatever else ingest writes there: nothing here names them), uploaded once, under
  a name no other writer uses, so that two replicas racing never overwrite each other's files;
- ``_commits/<generation>.json``: the commit object, written last and only if absent (``If-None-Match: *``,
  obstore's ``mode="create"``): the manifest of that generation and where each of its files is. Of two
  replicas committing the same generation exactly one succeeds; the other (:class:`LostCommit`) drops its
  work and mirrors the winner's.

A replica that has not ingested a run mirrors the latest commit (:meth:`SharedStores.pull`): the files it
lacks, then the manifest last, so that its readers only ever see a whole commit. The whole store is
mirrored (a page's parts are read by row group, and the responses and tokens pages read any part).

The bucket may be deleted and re-created under a running replica: a local copy whose commit the bucket no
longer holds (gone, or another commit of that generation in its place) is dropped, and the replica mirrors
what the bucket now holds or, where it holds nothing usable, rebuilds the store from the rollout files above
the generations seen there; it says so (:meth:`SharedStores.recovery`, shown with the run, and the log).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson

from data.remote import _oserror, location
from data.remote_keys import Lister
from data.store.manifest import MANIFEST, manifest_bytes, replaced, write_atomic

log = logging.getLogger(__name__)

COMMITS = "_commits"
OBJECTS = "_objects"
# The local copy's record of the commit it holds (a hidden file: never published).
SYNCED = ".synced.json"
# Why the local copy was dropped and from which generation on it is rebuilt (a hidden file: never
# published; removed by the ingest that commits the rebuilt store).
RECOVERED = ".recovered.json"
# Files transferred at once (each a request of its own; the parts of a run are many and small).
TRANSFERS = 8
# A replica that saw another commit a store within this many seconds (by its own clock, between two of its
# looks: hosts' clocks may differ) leaves the reading of that run to it and only mirrors its commits: one
# replica reads a live run while it keeps committing; another takes over once it stops.
LEASE_SECONDS = 30.0
# (URL, local copy) -> (the last generation this process saw committed, when it saw another's commit).
_SEEN: dict[tuple[str, str], tuple[int, float]] = {}
_SEEN_LOCK = threading.Lock()


class LostCommit(Exception):
    """Another replica committed this generation of the store first: this one's work is dropped."""


def _commit_key(generation: int) -> str:
    return f"{COMMITS}/{generation:012d}.json"


@dataclass(frozen=True)
class SharedStores:
    """The stores under an object store's URL (``s3://bucket/prefix``) and their working copies under a
    local folder."""

    url: str
    options: tuple[tuple[str, str], ...] = ()

    # ---- the client ----------------------------------------------------------------------------------
    def _root(self, store_dir: Path):
        """The store folder's prefix on the object store (a RemotePath; its client made in this process)."""
        return location(self.url, dict(self.options)) / store_dir.name

    def problem(self) -> str | None:
        """Why the stores' URL cannot be used (no such bucket, refused, no answer), or None."""
        import obstore

        remote = location(self.url, dict(self.options))
        try:
            obstore.list_with_delimiter(remote._root.store, None)
        except Exception as e:  # noqa: BLE001 - said as a local folder's problem would be
            err = _oserror(e, remote)
            return f"the stores' folder {self.url} cannot be used: {err.strerror}"
        return None

    # ---- what the bucket holds -----------------------------------------------------------------------
    def latest(self, store_dir: Path, after: int = 0) -> int | None:
        """The last generation committed on the object store after ``after`` (None: none after it)."""
        listed = self._listed(store_dir, after)
        return max(listed) if listed else None

    def _listed(self, store_dir: Path, after: int = 0) -> dict[int, str | None]:
        """``{generation: ETag of its commit object}`` of the commits on the object store after ``after``."""
        remote = self._root(store_dir)
        offset = f"{remote.key}/{_commit_key(after)}" if after else None
        out: dict[int, str | None] = {}
        try:  # past any key there the client cannot name (the bucket is untrusted too)
            listed = Lister(remote._root.store, remote._root.raw_keys).all(
                f"{remote.key}/{COMMITS}", offset=offset
            )
        except Exception as e:  # noqa: BLE001 - as the OSError a local listing would raise
            raise _oserror(e, remote) from None
        for o in listed:
            name = o["path"].rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit():
                out[int(name[:-5])] = o.get("e_tag")
        return out

    def commit_object(self, store_dir: Path, generation: int) -> dict:
        return orjson.loads((self._root(store_dir) / _commit_key(generation)).read_bytes())

    # ---- the local copy ------------------------------------------------------------------------------
    def _synced(self, store_dir: Path) -> dict | None:
        try:
            data = orjson.loads((store_dir / SYNCED).read_bytes())
        except (FileNotFoundError, NotADirectoryError, orjson.JSONDecodeError):
            return None
        return data if isinstance(data, dict) and data.get("url") == self.url else None

    def _local_generation(self, store_dir: Path) -> int | None:
        try:
            return orjson.loads((store_dir / MANIFEST).read_bytes())["generation"]
        except (FileNotFoundError, NotADirectoryError, orjson.JSONDecodeError, KeyError, TypeError):
            return None

    def pull(self, store_dir: Path) -> int:
        """Make the local copy (``store_dir``) the last commit on the object store; called under the store's
        lock. Returns the generation it now holds (0: none usable on the object store; the copy is then
        empty, and rebuilt from the rollout files). An object gone while it was fetched (a writer two
        commits on collected it) is no error: the commit then last is fetched instead; a commit whose
        objects stay gone (the bucket re-created under a replica that went on committing) is dropped and
        the store rebuilt above it (see :meth:`recovery`)."""
        for _ in range(3):
            try:
                return self._pull(store_dir)
            except FileNotFoundError:
                continue
        try:
            return self._pull(store_dir)
        except FileNotFoundError as e:
            newest = self.latest(store_dir) or 0
            return self._drop(
                store_dir,
                f"the bucket's last commit (generation {newest}) names objects it does not hold ({e.filename})",
                newest,
            )

    def recovery(self, store_dir: Path) -> tuple[str, int] | None:
        """``(what happened, generation)`` when the local copy was dropped and the store is to be rebuilt
        from the rollout files, its first commit above that generation; else None."""
        try:
            data = orjson.loads((store_dir / RECOVERED).read_bytes())
            return str(data["note"]), int(data["above"])
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def recovered(self, store_dir: Path) -> None:
        """The rebuilt store is committed: :meth:`recovery` says nothing more."""
        (store_dir / RECOVERED).unlink(missing_ok=True)

    def _drop(self, store_dir: Path, why: str, above: int) -> int:
        """Empty the local copy, say why, and leave the store to be rebuilt above ``above``."""
        note = (
            f"Store rebuilt from the rollout files: {why}; the bucket {self.url} was emptied or re-created "
            "(its commits are no longer those this copy held)."
        )
        log.warning("store %s: %s", store_dir.name, note)
        _clear(store_dir)
        write_atomic(store_dir / RECOVERED, orjson.dumps({"note": note, "above": above}))
        return 0

    def _pull(self, store_dir: Path) -> int:
        store_dir.mkdir(parents=True, exist_ok=True)
        synced = self._synced(store_dir)
        held = synced["generation"] if synced else 0
        # The copy is as its last pull or publish left it (not past it: a commit another replica won).
        clean = synced is not None and self._local_generation(store_dir) == held
        # From the held commit on (one listing): that the bucket still holds it, as this copy got it.
        listed = self._listed(store_dir, after=held - 1 if clean and held > 1 else 0)
        if clean and held:
            there, mine = listed.get(held, "gone"), synced.get("commit")
            if there == "gone" or (mine is not None and there is not None and there != mine):
                what = "is gone" if there == "gone" else "is another commit"
                _clear(store_dir)
                listed = self._listed(store_dir)  # what the bucket holds now, from its first commit
                if not listed:
                    return self._drop(store_dir, f"generation {held}, which this copy held, {what}", 0)
                log.warning(
                    "store %s: generation %d, which this copy held, %s on %s (the bucket was emptied or "
                    "re-created): the copy is dropped and mirrored again",
                    store_dir.name,
                    held,
                    what,
                    self.url,
                )
                synced, held, clean = None, 0, False
        newest = max(listed) if listed else None
        if newest is None or (clean and newest == held):
            if clean:
                return held  # up to date
            _clear(store_dir)  # the bucket holds none of it (emptied, or never published): start afresh
            return 0
        commit = self.commit_object(store_dir, newest)
        self._saw(store_dir, newest)
        old = synced["files"] if synced else {}
        self._download(store_dir, commit["files"], old)
        write_atomic(store_dir / MANIFEST, manifest_bytes(commit["manifest"]))
        # Files of neither this commit nor the one held before (kept for readers still on it) go.
        keep = set(commit["files"]) | set(old) | {MANIFEST}
        for path in _files(store_dir):
            if path.relative_to(store_dir).as_posix() not in keep:
                path.unlink(missing_ok=True)
        self._record(store_dir, newest, commit["files"], commit.get("superseded", []), listed[newest])
        self.recovered(store_dir)  # the bucket's store, whole: nothing is to be rebuilt
        return newest

    def _saw(self, store_dir: Path, generation: int, by_other: bool = True) -> None:
        """Note that ``generation`` is committed (by another replica: its reading is under way)."""
        key = (self.url, str(store_dir))
        with _SEEN_LOCK:
            prev = _SEEN.get(key)
            if prev is None:  # this process's first look: no sign that anyone is reading now
                _SEEN[key] = (generation, float("-inf"))
            elif generation > prev[0]:
                _SEEN[key] = (generation, time.monotonic() if by_other else prev[1])

    def deferring(self, store_dir: Path) -> bool:
        """Whether another replica committed this store within :data:`LEASE_SECONDS` (seen by this
        process): it is reading the run, so this one only mirrors its commits."""
        with _SEEN_LOCK:
            seen = _SEEN.get((self.url, str(store_dir)))
        return seen is not None and time.monotonic() - seen[1] < LEASE_SECONDS

    def _download(self, store_dir: Path, files: dict, old: dict) -> None:
        import obstore

        remote = self._root(store_dir)
        wanted = []
        for rel, (key, size) in files.items():
            path = store_dir / rel
            had = old.get(rel)
            if had and had[0] == key and _stat(path) == (size, had[2]):
                continue  # the file as this copy had it (not written again since)
            wanted.append((rel, key))

        def fetch(item: tuple[str, str]) -> None:
            rel, key = item
            path = store_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            full = f"{remote.key}/{key}"
            try:
                with replaced(path, sync=False) as tmp, open(tmp, "wb") as f:
                    for chunk in obstore.get(remote._root.store, full):
                        f.write(chunk)
            except Exception as e:  # noqa: BLE001 - as the OSError a local read would raise
                raise _oserror(e, remote / key) from None

        _each(fetch, wanted)

    def _record(
        self, store_dir: Path, generation: int, files: dict, superseded: list[str], commit: str | None
    ) -> None:
        """Note which commit the local copy holds, the size and time of each file as it is now (a file
        changed since is published again) and the objects that commit no longer names."""
        out = {}
        for rel, (key, size) in files.items():
            try:
                st = (store_dir / rel).stat()
            except FileNotFoundError:
                continue
            out[rel] = [key, size, st.st_mtime_ns]
        record = {"url": self.url, "generation": generation, "files": out, "superseded": superseded}
        record["commit"] = commit  # the commit object's ETag: the bucket re-created holds another
        write_atomic(store_dir / SYNCED, orjson.dumps(record))

    # ---- committing ----------------------------------------------------------------------------------
    def publish(self, store_dir: Path, manifest: dict) -> None:
        """Commit the local copy's new generation (``manifest``, just committed locally) to the object
        store: the files it does not hold yet first, then the commit object, only if that generation is
        not committed yet. Raises :class:`LostCommit` when another replica committed it first."""
        import obstore
        import obstore.exceptions as ox

        remote = self._root(store_dir)
        generation = manifest["generation"]
        synced = self._synced(store_dir) or {"files": {}, "superseded": []}
        writer = f"{generation:06d}-{secrets.token_hex(4)}"
        files: dict[str, list] = {}
        uploads = []
        for path in _files(store_dir):
            rel = path.relative_to(store_dir).as_posix()
            if rel == MANIFEST:
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # collected meanwhile
            had = synced["files"].get(rel)
            if had and had[1] == st.st_size and had[2] == st.st_mtime_ns:
                files[rel] = [had[0], st.st_size]
            else:
                files[rel] = [f"{OBJECTS}/{writer}/{rel}", st.st_size]
                uploads.append((path, f"{remote.key}/{OBJECTS}/{writer}/{rel}"))

        def put(item: tuple[Path, str]) -> None:
            path, key = item
            try:
                obstore.put(remote._root.store, key, path)
            except Exception as e:  # noqa: BLE001
                raise _oserror(e, remote / key) from None

        _each(put, uploads)
        named = {key for key, _ in files.values()}
        superseded = sorted({had[0] for had in synced["files"].values()} - named)
        body = orjson.dumps(
            {
                "generation": generation,
                "writer": writer,
                "time": time.time(),
                "files": files,
                "superseded": superseded,  # named by the commit before, not by this one
                "manifest": manifest,
            }
        )
        try:
            put = obstore.put(
                remote._root.store, f"{remote.key}/{_commit_key(generation)}", body, mode="create"
            )
        except ox.AlreadyExistsError:
            with _SEEN_LOCK:  # the winner is reading the run: this replica leaves it to it
                _SEEN[(self.url, str(store_dir))] = (generation, time.monotonic())
            # Another replica committed this generation: its files stay, ours go.
            for _, key in uploads:
                try:
                    obstore.delete(remote._root.store, key)
                except Exception:  # noqa: BLE001, S110 - garbage left in the bucket at worst
                    pass
            raise LostCommit(
                f"generation {generation} of {store_dir.name} was committed by another replica"
            ) from None
        except Exception as e:  # noqa: BLE001
            raise _oserror(e, remote / _commit_key(generation)) from None
        # The objects the commit before this one dropped are named by none of the last two commits: gone
        # (kept one generation, as local files are, for replicas still mirroring that one).
        for key in synced.get("superseded", []):
            try:
                obstore.delete(remote._root.store, f"{remote.key}/{key}")
            except Exception:  # noqa: BLE001, S110 - garbage left in the bucket at worst
                pass
        self._record(store_dir, generation, files, superseded, put.get("e_tag"))
        self._saw(store_dir, generation, by_other=False)


def _files(store_dir: Path) -> list[Path]:
    """Every file of a store folder but hidden ones (its lock, temporary files, :data:`SYNCED`)."""
    out = []
    for folder, dirs, names in os.walk(store_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [Path(folder) / n for n in sorted(names) if not n.startswith(".")]
    return out


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def _clear(store_dir: Path) -> None:
    """Empty a local copy (its lock stays: it is held; and why it is being rebuilt)."""
    for entry in store_dir.iterdir():
        if entry.name in (".lock", RECOVERED):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _each(fn, items: list) -> None:
    """``fn`` of each item, :data:`TRANSFERS` at a time (the first error raised)."""
    if len(items) <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=TRANSFERS, thread_name_prefix="store-sync") as pool:
        for _ in pool.map(fn, items):
            pass


__all__ = ["LostCommit", "SharedStores"]
