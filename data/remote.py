"""Rollout roots on object storage: ``s3://bucket/prefix`` (and the other schemes of obstore: ``gs://``,
``az://``, ``memory:///``…) as a path the board lists, stats and reads by byte range like a folder on disk.

:class:`RemotePath` has the few calls of :class:`pathlib.Path` that discovery and ingest make (``/``,
``name``, ``relative_to``, ``iterdir``, ``stat``, ``open``…), so that the same code reads both. A file is
read from an offset with one ranged GET per block (obstore, the Rust ``object_store`` crate that Polars and
delta-rs use too); a folder is a key prefix. Errors are raised as :class:`OSError` with an ``errno``, as a
local read's are, so that what cannot be read is reported the same way (see :mod:`data.access`).
"""

from __future__ import annotations

import errno
import fnmatch
import io
import os
import re
import stat as stat_mod
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath

from data.remote_keys import MARKER, Lister, bad_key, s3_keys

_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)
# Reading a whole compressed or Parquet file: GETs of this many bytes (a ranged GET per small read of
# gzip's or zstd's reader would cost a round trip each).
WHOLE_READ_BYTES = 8 << 20
# A request that fails (a 5xx, a dropped connection) is tried again 3 times within 30 s (obstore's default:
# 10 times within 3 minutes, which held a page for as long when the server was down).
RETRIES = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
# What a failed request's text says of the network, as the errno a local read would give.
_NETWORK = (
    ("Connection refused", errno.ECONNREFUSED, "connection refused by the endpoint"),
    ("dns error", errno.EHOSTUNREACH, "the endpoint's name is not found"),
    ("timed out", errno.ETIMEDOUT, "the endpoint did not answer in time"),
)


def is_url(text: str) -> bool:
    """Whether ``text`` names an object store (``s3://…``), not a local path (``file://`` is local)."""
    m = _URL.match(str(text))
    return m is not None and m.group(1).lower() != "file"


def location(text: str | Path, options: dict[str, str] | None = None) -> Path | RemotePath:
    """A local folder as a :class:`Path`, an object store's URL as a :class:`RemotePath` (``options``: the
    store's settings, e.g. ``aws_endpoint``; see :func:`data.config.storage_options`)."""
    if isinstance(text, RemotePath | Path):
        return text
    text = str(text)
    if text.lower().startswith("file://"):
        return Path(text[len("file://") :])
    if not is_url(text):
        return Path(text)
    return RemotePath(_Root.of(text, options or {}), "")


def as_path(value) -> Path | RemotePath:
    """``value`` as :class:`Path` unless it is a :class:`RemotePath` already (``Path(remote)`` would take its
    URL for a local file name)."""
    return value if isinstance(value, RemotePath) else Path(value)


@dataclass(frozen=True)
class RemoteStat:
    """What ``stat`` says of an object (or of a folder: a key prefix, size 0). ``st_dev`` and ``st_ino`` are
    0: an object store has no inode, and a rewritten object is told by its fingerprint, as on a disk.
    ``etag`` changes whenever the object is written again (an unchanged ETag: nothing to read)."""

    st_size: int
    st_mtime_ns: int
    etag: str | None = None
    is_dir: bool = False

    st_dev = 0
    st_ino = 0
    st_uid = 0
    st_gid = 0

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9

    @property
    def st_ctime_ns(self) -> int:
        return self.st_mtime_ns

    @property
    def st_mode(self) -> int:
        return (stat_mod.S_IFDIR | 0o555) if self.is_dir else (stat_mod.S_IFREG | 0o444)


def _stat_of(meta: dict) -> RemoteStat:
    modified = meta.get("last_modified")
    ns = int(modified.timestamp() * 1e9) if modified is not None else 0
    return RemoteStat(int(meta["size"]), ns, meta.get("e_tag"))


_DIR = RemoteStat(0, 0, None, True)


class _Root:
    """One object store opened at a URL (its client made once per URL and options in a process)."""

    _clients: dict[tuple, _Root] = {}
    _lock = threading.Lock()

    def __init__(self, url: str, options: dict[str, str]):
        from obstore.store import from_url

        self.url = url
        # Keys as the server names them, where a listing holds one obstore cannot name (s3:// only).
        self.raw_keys = s3_keys(url, options)
        # Opened at a prefix below the bucket (s3://bucket/runs): a prefix with no object is no folder.
        self.prefixed = "/" in url.split("://", 1)[1].strip("/")
        client_options = {"allow_http": True} if options.get("aws_endpoint", "").startswith("http://") else {}
        config = {k: v for k, v in options.items() if k.split("_")[0] in _scheme_prefixes(url)}
        try:
            self.store = from_url(
                url, config=config or None, client_options=client_options or None, retry_config=RETRIES
            )
        except Exception as e:  # noqa: BLE001 - a URL obstore cannot open: said as the root's problem
            raise OSError(errno.EINVAL, f"cannot open {url}: {str(e).splitlines()[0]}") from None

    @classmethod
    def of(cls, url: str, options: dict[str, str]) -> _Root:
        """The store at ``url`` (one client per process: obstore's runtime does not survive a fork, and
        gunicorn forks its workers from a process that may have opened one)."""
        url = url.rstrip("/")
        key = (os.getpid(), url, tuple(sorted(options.items())))
        with cls._lock:
            root = cls._clients.get(key)
        if root is None:
            root = cls(url, options)
            with cls._lock:
                cls._clients[key] = root
        return root


def _scheme_prefixes(url: str) -> tuple[str, ...]:
    """The prefixes of the option names a URL's store takes (``aws_…`` for ``s3://``)."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("s3", "s3a"):
        return ("aws",)
    if scheme in ("gs", "gcs"):
        return ("google",)
    if scheme in ("az", "adl", "azure", "abfs", "abfss"):
        return ("azure",)
    return ()


_STATUS = re.compile(r"status code: (\d{3})\b")


def _oserror(e: Exception, path: RemotePath) -> OSError:
    """An obstore error as the OSError a local read would raise (``errno`` set, ``filename`` the URL)."""
    import obstore.exceptions as ox

    name = str(path)
    if isinstance(e, ox.NotFoundError | FileNotFoundError):
        return FileNotFoundError(errno.ENOENT, "no such object", name)
    if isinstance(e, ox.PermissionDeniedError | ox.UnauthenticatedError):
        return PermissionError(errno.EACCES, "permission denied", name)
    if isinstance(e, OSError) and e.errno is not None:
        return e
    full = str(e)
    for marker, code, reason in _NETWORK:
        if marker in full:
            return OSError(code, reason, name)
    text = full.split("\n", 1)[0]
    # The HTTP status as the client reports it, never a "403" found anywhere in the line: the line holds
    # the request's URL, whose port (say 127.0.0.1:40312) or key may contain those digits.
    status = _STATUS.search(text)
    code = status.group(1) if status else None
    if code == "403" or "Forbidden" in text or "AccessDenied" in text:
        return PermissionError(errno.EACCES, "permission denied", name)
    if code == "404" or "NoSuchBucket" in text or "NoSuchKey" in text:
        return FileNotFoundError(errno.ENOENT, "no such bucket or object", name)
    return OSError(errno.EIO, f"object store error: {text[:300]}", name)


class RemotePath:
    """A file or folder (key prefix) under an object store's URL, with the calls of :class:`pathlib.Path`
    that the board makes on a rollout root. What a listing said of a child (its size, time, ETag) is kept,
    so that stat after a listing costs no request."""

    __slots__ = ("_meta", "_root", "key")

    def __init__(self, root: _Root, key: str, meta: RemoteStat | None = None):
        self._root = root
        self.key = key.strip("/")
        self._meta = meta

    # --- names ----------------------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self._root.url}/{self.key}" if self.key else self._root.url

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: RemotePath) -> bool:
        return str(self) < str(other)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else self._root.url.rsplit("/", 1)[-1]

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self._root, self.key.rsplit("/", 1)[0] if "/" in self.key else "")

    def __truediv__(self, name: str) -> RemotePath:
        name = str(name).strip("/")
        return RemotePath(self._root, f"{self.key}/{name}" if self.key else name)

    def child(self, rel: str, meta: RemoteStat) -> RemotePath:
        """The file ``rel`` below this folder, with what a listing said of it (its stat is then no request:
        the files of one listing are read as they were at that moment)."""
        return RemotePath(self._root, f"{self.key}/{rel}" if self.key else rel, meta)

    def relative_to(self, other: RemotePath) -> PurePosixPath:
        if not isinstance(other, RemotePath) or other._root is not self._root:
            raise ValueError(f"{self} is not under {other}")
        if not other.key:
            return PurePosixPath(self.key)
        if not self.key.startswith(other.key + "/"):
            raise ValueError(f"{self} is not under {other}")
        return PurePosixPath(self.key[len(other.key) + 1 :])

    def as_posix(self) -> str:
        return str(self)

    def resolve(self) -> RemotePath:
        return self  # an object store has no links

    def is_symlink(self) -> bool:
        return False

    # --- listing --------------------------------------------------------------------------------------
    def _prefix(self) -> str | None:
        return f"{self.key}/" if self.key else None

    def _child(self, path: str, meta: RemoteStat) -> RemotePath:
        return RemotePath(self._root, path, meta)

    def iterdir(self):
        """The files and folders directly under this folder (a folder: a key prefix); sorted."""
        return iter(self.list_dir())

    def list_dir(self, skipped: list[tuple[str, str]] | None = None) -> list[RemotePath]:
        """:meth:`iterdir` as a list; keys below the folder that the client cannot name (see
        :mod:`data.remote_keys`) are left out and appended to ``skipped`` as ``(path inside it, reason)``."""
        import obstore

        files: list[RemotePath] = []
        try:
            found = obstore.list_with_delimiter(self._root.store, self._prefix())
        except Exception as e:  # noqa: BLE001 - as the OSError a local listing would raise
            if bad_key(e) is None:
                raise _oserror(e, self) from None
            # A key it cannot name among the children: the folders and files named by a listing of every
            # key below, past those keys.
            found = {"common_prefixes": [], "objects": []}
            folders = set()
            for rel, st in self.walk_files(skipped):
                if "/" in rel:
                    folders.add(self._join(rel.split("/", 1)[0]))
                elif rel:
                    files.append(self._child(self._join(rel), st))
            found["common_prefixes"] = sorted(folders)
        children = [self._child(p, _DIR) for p in found["common_prefixes"]]
        children += [self._child(o["path"], _stat_of(o)) for o in found["objects"]] + files
        children = [c for c in children if c.key != self.key]  # the folder's own marker (``folder/``)
        if not children and (self.key or self._root.prefixed) and not self._meta:
            raise FileNotFoundError(errno.ENOENT, "no such folder", str(self))
        return sorted(children)

    def _join(self, rel: str) -> str:
        return f"{self.key}/{rel}" if self.key else rel

    def walk_files(self, skipped: list[tuple[str, str]] | None = None) -> list[tuple[str, RemoteStat]]:
        """Every object below this folder: ``(path inside it, stat)``, in one listing, sorted. A key the
        client cannot name (an empty, ``.`` or ``..`` segment) and a directory marker (a key ending in
        ``/``, which the client names as the object without it) beside the file of that name are left out
        and appended to ``skipped`` as ``(path inside the folder, reason)``: one such key costs only itself."""
        lister = Lister(self._root.store, self._root.raw_keys)
        try:
            listed = lister.all(self.key or None)
        except Exception as e:  # noqa: BLE001 - as the OSError a local listing would raise
            raise _oserror(e, self) from None
        n = len(self.key) + 1 if self.key else 0
        out, seen = [], set()
        for o in listed:
            rel = o["path"][n:]
            if not rel or (self.key and not o["path"].startswith(self.key + "/")):
                continue  # the folder's own marker (``folder/``)
            if rel in seen:
                # S3 lists ``name`` before ``name/`` (UTF-8 binary order): the second is the marker.
                if skipped is not None:
                    skipped.append((rel + "/", MARKER))
                continue
            seen.add(rel)
            out.append((rel, _stat_of(o)))
        if skipped is not None:
            for key, why in lister.skipped:
                rel = key[n:] if self.key and key.startswith(self.key + "/") else key
                skipped.append((rel, why))  # "": the folder itself
        return sorted(out, key=lambda item: item[0])

    def glob(self, pattern: str):
        """The files matching ``pattern`` (``name`` or ``*/name``: one level of folders at most)."""
        depth = pattern.count("/")
        for rel, st in self.walk_files():
            if rel.count("/") == depth and fnmatch.fnmatchcase(rel, pattern):
                yield self._child(f"{self.key}/{rel}" if self.key else rel, st)

    # --- one object -----------------------------------------------------------------------------------
    def stat(self) -> RemoteStat:
        if self._meta is not None:
            return self._meta
        import obstore

        if not self.key:
            return _DIR
        try:
            return _stat_of(obstore.head(self._root.store, self.key))
        except Exception as e:  # noqa: BLE001
            err = _oserror(e, self)
            if isinstance(err, FileNotFoundError) and self._has_children():
                return _DIR
            raise err from None

    def _has_children(self) -> bool:
        import obstore

        try:
            found = obstore.list_with_delimiter(self._root.store, self._prefix())
        except Exception as e:  # noqa: BLE001 - no folder to say anything of
            return bad_key(e) is not None  # a key below it the client cannot name: a folder all the same
        return bool(found["objects"] or found["common_prefixes"])

    def is_dir(self) -> bool:
        if self._meta is not None:
            return self._meta.is_dir
        if not self.key:
            try:
                self.iterdir()
            except OSError:
                return False
            return True
        return self._has_children()

    def is_file(self) -> bool:
        try:
            return not self.stat().is_dir
        except OSError:
            return False

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def open(self, mode: str = "rb", buffering: int = -1):
        """A seekable binary reader of the object: each read one ranged GET (``buffering`` > 0: reads of at
        least that many bytes, for readers that read in small pieces)."""
        if mode != "rb":
            raise PermissionError(errno.EACCES, "the rollout root is read only", str(self))
        raw = _RangeReader(self, self.stat().st_size)
        return io.BufferedReader(raw, buffering) if buffering > 0 else raw

    def read_bytes(self) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self._root.store, self.key).bytes())
        except Exception as e:  # noqa: BLE001
            raise self._read_error(e) from None

    def get_range(self, start: int, end: int) -> bytes:
        import obstore

        if end <= start:
            return b""
        try:
            return obstore.get_range(self._root.store, self.key, start=start, end=end)
        except Exception as e:  # noqa: BLE001
            raise self._read_error(e) from None

    def get_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of several ``(start, end)`` ranges, fetched together (near ones in one GET, the rest
        in parallel: a few ranges cost about one round trip, not one each)."""
        import obstore

        wanted = [(a, b) for a, b in ranges if b > a]
        if not wanted:
            return [b"" for _ in ranges]
        try:
            got = iter(
                obstore.get_ranges(
                    self._root.store, self.key, starts=[a for a, _ in wanted], ends=[b for _, b in wanted]
                )
            )
        except Exception as e:  # noqa: BLE001
            raise self._read_error(e) from None
        return [bytes(next(got)) if b > a else b"" for a, b in ranges]

    def _read_error(self, e: Exception) -> OSError:
        """A failed read as an OSError; a listed object that is not there because the listing named a
        directory marker (``name/``, which the client lists as ``name``) says so (one more listing, only
        then)."""
        err = _oserror(e, self)
        if not isinstance(err, FileNotFoundError) or self._meta is None or not self.key:
            return err
        import obstore

        try:  # a listing below ``name/`` names the marker itself as ``name``
            marker = any(o["path"] == self.key for b in obstore.list(self._root.store, self.key) for o in b)
        except Exception:  # noqa: BLE001 - not known: the read's own error
            return err
        if marker:
            return IsADirectoryError(
                errno.EISDIR, "a directory marker (a key ending in /), not a file", str(self)
            )
        return err


class _RangeReader(io.RawIOBase):
    """A seekable reader of one object of ``size`` bytes (as listed): each read one ranged GET."""

    def __init__(self, path: RemotePath, size: int):
        self.path, self.size, self.pos = path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buf) -> int:
        end = min(self.size, self.pos + len(buf))
        if end <= self.pos:
            return 0
        data = self.path.get_range(self.pos, end)
        n = len(data)
        memoryview(buf)[:n] = memoryview(data)
        self.pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        data = bytes(self.path.get_range(self.pos, end))
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)
