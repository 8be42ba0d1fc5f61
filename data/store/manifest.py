"""The manifest of a store (what it holds: per source file its size, mtime, offset, line count, parts and
full digest), written atomically and last, so that readers only ever see a committed state; and the
removal of the stores an older format left."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import orjson
from filelock import FileLock, Timeout

from data.store.layout import ROW_GROUP_SIZE, STORE_FORMAT

MANIFEST = "manifest.json"
# The key of a file's entry in ``files`` that holds its full digest (see FileDigest).
DIGEST = "digest"
# The format of the store an older version wrote of the run, which this one replaced (said on the runs page).
REBUILT_FROM = "rebuilt_from"


@dataclass(frozen=True)
class DerivedEntry:
    """A derived kind's entry in the manifest: its file (None for a kind of several files, which ``meta``
    names) and what else the commit kept of it (e.g. the prompt list's trend threshold)."""

    name: str | None
    meta: Mapping[str, Any] = field(default_factory=dict)


# Each derived kind's key in the manifest's file, and how its entry is kept there: "name" (the file's name,
# with the other keys of ``meta`` beside it at the top level) or "entry" (an object: ``meta``, whose
# ``name_key`` names the file).
_DERIVED: dict[str, tuple[str, str, dict[str, str]]] = {
    "steps": ("steps_file", "name", {}),
    "cells": ("cells_file", "name", {}),
    "ends": ("ends_file", "name", {}),
    "prompts": ("prompts_file", "name", {"threshold": "prompts_threshold"}),
    "matches": ("prompt_matches_file", "name", {}),
    "facts": ("facts_file", "name", {}),
    "tokscale": ("token_scale_file", "name", {}),
    "pidx": ("prompt_index", "entry", {}),
    "topk": ("topk", "entry", {"name_key": "file"}),
    "texttop": ("text_top", "entry", {"name_key": "name"}),
}


@dataclass(frozen=True)
class FileDigest:
    """A rollout file's full digest, as its entry in the manifest's ``files`` keeps it (key ``digest``, the
    JSON list ``[at, chain, upto, hash]``): ``hash`` covers the file's first ``upto`` bytes (those read);
    ``chain`` is the state after its whole blocks up to ``at``, from which a read on goes on (see
    data.ingest.digest, which makes it; a same-size file whose time moved is hashed again and compared)."""

    at: int
    chain: str
    upto: int
    hash: str

    @classmethod
    def of(cls, value) -> FileDigest | None:
        """The digest of a file entry's ``digest`` value (None: the entry has none); ``ValueError`` for
        anything else than the list its writer makes."""
        if value is None:
            return None
        ok = isinstance(value, list | tuple) and len(value) == 4
        at, chain, upto, digest = value if ok else (None,) * 4
        ints = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (at, upto))
        if not (ints and at <= upto and _is_hex(chain, (0, 32)) and _is_hex(digest, (32,))):
            raise ValueError(f"a file's digest is not [at, chain, upto, hash]: {value!r:.200}")
        return cls(at, chain, upto, digest)

    def to_json(self) -> list:
        return [self.at, self.chain, self.upto, self.hash]


def _is_hex(value, lengths: tuple[int, ...]) -> bool:
    if not isinstance(value, str) or len(value) not in lengths:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Manifest:
    """What a committed store holds (read only): per source file its size, offset, lines, parts and full
    digest (``files``; :meth:`file_digest`), the parts (``parts``: rows, issue counts, steps, blocks, writer's tag), the lines of a
    file held back (``pending``), and each derived kind's files (``derived``, see data.store.layout's list).
    Made from the bytes of ``manifest.json`` (:meth:`from_bytes`); a key it does not know is refused."""

    format: int
    generation: int
    run: str
    run_path: str
    pad_tokens: tuple[str, ...]
    next_part: int
    files: Mapping[str, dict]
    parts: Mapping[str, dict]
    pending: Mapping[str, dict]
    derived: Mapping[str, DerivedEntry]
    packs: tuple[dict, ...] = ()
    row_group_size: int = ROW_GROUP_SIZE
    updated: float | None = None
    visible_below: int | None = None
    manifest_file: str | None = None  # this commit's copy in manifests/ (see data.store.table)
    table_version: int | None = None
    options: Any = None  # the reading options' key (see data.ingest.options)
    split: str = "train"
    problems: tuple[str, ...] = ()
    unreadable: Mapping[str, str] = field(default_factory=dict)
    ignored_fields: tuple[str, ...] = ()
    extra_columns: tuple[str, ...] = ()
    token_extras: tuple[str, ...] = ()
    tokenizer: str | None = None
    reward_formed: Mapping[str, Any] | None = None
    fields_map: Mapping[str, Any] | None = (
        None  # rlboard.toml's [fields]: {"table": {name: path}, "where": …}
    )
    ends_with: tuple[str, ...] | None = None  # the end tokens the ends counts were made with
    rebuilt_from: int | None = None  # the format of the older store this one replaced

    @classmethod
    def from_dict(cls, data: dict) -> Manifest:
        """The manifest a manifest file's JSON object ``data`` holds; ``ValueError`` for a key not known."""
        data = dict(data)
        derived = {}
        for kind, (key, how, extra) in _DERIVED.items():
            value = data.pop(key, None)
            meta = {m: data.pop(k, None) for m, k in extra.items() if how == "name"}
            if value is None:
                continue
            if how == "name":
                derived[kind] = DerivedEntry(value, meta)
            else:
                derived[kind] = DerivedEntry(value.get(extra["name_key"]) if extra else None, value)
        names = {f.name for f in fields(cls)} - {"derived"}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"manifest keys not known: {sorted(unknown)}")
        tuples = ("pad_tokens", "packs", "problems", "ignored_fields", "extra_columns", "token_extras")
        for k in tuples:
            if data.get(k) is not None:
                data[k] = tuple(data[k])
        if data.get("ends_with") is not None:
            data["ends_with"] = tuple(data["ends_with"])
        for k in ("files", "parts", "pending", "unreadable"):
            data.setdefault(k, {})
        for entry in data["files"].values():
            FileDigest.of(entry.get(DIGEST) if isinstance(entry, dict) else None)  # refused when malformed
        return cls(derived=derived, **{k: v for k, v in data.items() if v is not None or k in ("updated",)})

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        return cls.from_dict(orjson.loads(raw))

    def to_dict(self) -> dict:
        """The JSON object of the manifest's file (what :meth:`from_dict` reads)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "derived"}
        for k, v in out.items():
            if isinstance(v, tuple):
                out[k] = list(v)
        for kind, (key, how, extra) in _DERIVED.items():
            entry = self.derived.get(kind)
            if how == "name":
                out[key] = entry.name if entry else None
                out.update({k: (entry.meta.get(m) if entry else None) for m, k in extra.items()})
            else:
                out[key] = dict(entry.meta) if entry else None
        return out

    def to_bytes(self) -> bytes:
        return manifest_bytes(self.to_dict())

    def without(self, *kinds: str) -> Manifest:
        """This manifest with no entry for derived ``kinds`` (as a commit that wrote none of them)."""
        return replace(self, derived={k: e for k, e in self.derived.items() if k not in kinds})

    def with_derived(self, kind: str, entry: DerivedEntry) -> Manifest:
        """This manifest with ``entry`` for derived ``kind``."""
        return replace(self, derived={**self.derived, kind: entry})

    @property
    def unusable_lines(self) -> int:
        """Lines of the run's files that could not be read (the ``errors`` of every part)."""
        return sum(p.get("errors", 0) for p in self.parts.values())

    @property
    def rows(self) -> int:
        """Responses the store holds (the ``rows`` of every part)."""
        return sum(p.get("rows", 0) for p in self.parts.values())

    def file_digest(self, rel: str) -> FileDigest | None:
        """The full digest of rollout file ``rel`` as last read (None: not read to its end yet)."""
        entry = self.files.get(rel)
        return FileDigest.of(entry.get(DIGEST)) if entry is not None else None

    def derived_name(self, kind: str) -> str | None:
        """The file of derived kind ``kind`` (None: this commit wrote none)."""
        entry = self.derived.get(kind)
        return None if entry is None else entry.name


@dataclass
class Draft:
    """The manifest a writer builds (ingest only): the JSON object of the file, changed in place until the
    commit writes it; readers get a :class:`Manifest`."""

    data: dict

    @classmethod
    def empty(cls, run: str, run_path: str, pad_tokens: tuple[str, ...]) -> Draft:
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


def read_manifest(store_dir: Path) -> Draft | None:
    """The manifest of the store in ``store_dir``; None when there is none, or it is of another
    ``STORE_FORMAT`` (a cache of an older version: rebuilt from the rollout files, never read)."""
    try:
        data = orjson.loads((store_dir / MANIFEST).read_bytes())
    except (FileNotFoundError, NotADirectoryError):  # no store (yet), or no cache folder to hold one
        return None
    return Draft(data) if of_this_format(data) else None


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


def remove_older_formats(store_dir: Path, draft: Draft) -> int | None:
    """Delete the stores an older version of the app made of the same run with the same pad tokens (a new
    ``STORE_FORMAT`` makes a new store, rebuilt from the rollout files; the old one would only take disk
    space). A store whose lock is held is left alone. Returns the newest older format found (None: none)."""
    older = older_stores(store_dir, draft.data["run_path"], draft.data["pad_tokens"])
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
