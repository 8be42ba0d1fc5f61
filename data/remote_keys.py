"""Listing a prefix of an object store past the keys its client cannot name: a key with an empty (``a//b``),
``.`` or ``..`` segment is skipped and reported, and the good keys around it are still listed.

obstore (the Rust ``object_store`` crate) parses each key of a listing as a path and refuses the whole page
(up to 1,000 keys) when one key does not parse (``client/s3.rs``: ``TryFrom<ListResponse> for ListResult``
collects every key's ``Path::parse`` into one ``Result``); no call of its Python API lists raw keys or sets a
page's size. A listing is made with obstore (one request a page, as before); only when it fails on such a
key is the prefix listed again:

- on S3 (and S3-compatible servers), by pyarrow's S3 client (the AWS SDK's, a dependency already), which
  takes keys as they are: every good key is listed, and a directory marker beside a file is told apart;
- elsewhere (``gs://``, ``az://``), by obstore again: the listing starts again after the key's bad segment
  (``offset``, ``start-after``: ``a/..0`` is past every key below ``a/../``) and the keys of the refused
  page before the key are listed folder by folder down its path (``list_with_delimiter``). A folder whose
  own listing holds a bad key cannot be listed that way: it is reported as possibly missing files.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# What each bad segment is, as the runs page says it.
BAD_SEGMENTS = {"": "an empty segment (//)", ".": "a '.' segment", "..": "a '..' segment"}
# A listing goes past at most this many keys that cannot be named (each costs a few requests); the rest of
# the prefix is then reported as not listed.
MAX_BAD_KEYS = 100
MARKER = "a directory marker (a key ending in /) beside the file of that name"
# The key as the error's debug text quotes it (Rust's escapes: \" \\ \n \u{…}).
_KEY = re.compile(r'path: "((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(u\{([0-9a-fA-F]+)\}|.)", re.DOTALL)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "0": "\0"}


def bad_key(exc: Exception) -> str | None:
    """The key that made a listing fail (``InvalidPathError``), or None for any other error."""
    import obstore.exceptions as ox

    if not isinstance(exc, ox.InvalidPathError):
        return None
    m = _KEY.search(str(exc))
    if m is None:
        return None

    def unescape(e: re.Match) -> str:
        if e.group(2):
            return chr(int(e.group(2), 16))
        return _SIMPLE.get(e.group(1), e.group(1))

    return _ESCAPE.sub(unescape, m.group(1))


def bad_segment(key: str, prefix: str | None) -> tuple[str, str] | None:
    """``(folder, segment)``: the first segment of ``key`` (below ``prefix``) that cannot be named and the
    folder holding it (a key prefix, ``""`` for the top of the store); None if it has none."""
    base = f"{prefix}/" if prefix else ""
    if not key.startswith(base):
        return None
    parts = key[len(base) :].split("/")
    for i, seg in enumerate(parts):
        if seg in BAD_SEGMENTS:
            return (base + "/".join(parts[:i])).rstrip("/") if i else (prefix or ""), seg
    return None


def reason(key: str, prefix: str | None) -> str:
    """Why ``key`` is skipped: ``"a key with a '..' segment, which the object store's client cannot name"``."""
    found = bad_segment(key, prefix)
    what = BAD_SEGMENTS[found[1]] if found else "a path it cannot parse"
    return f"a key with {what}, which the object store's client cannot name"


# (prefix) -> (files as (key, size, modified), folders): every key below a prefix as the server names it.
RawKeys = Callable[[str | None], tuple[list[tuple[str, int, object]], set[str]]]


def s3_keys(url: str, options: dict[str, str]) -> RawKeys | None:
    """A lister of the raw keys below a prefix of an ``s3://`` URL's store (``options``: obstore's
    ``aws_…`` settings), by pyarrow's S3 client; None for another scheme."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in ("s3", "s3a"):
        return None
    bucket, _, base = rest.partition("/")
    base = base.strip("/")

    def keys(prefix: str | None) -> tuple[list[tuple[str, int, object]], set[str]]:
        from pyarrow import fs

        kw: dict = {"region": options.get("aws_region"), "connect_timeout": 10, "request_timeout": 30}
        if options.get("aws_access_key_id") and options.get("aws_secret_access_key"):
            kw.update(
                access_key=options["aws_access_key_id"],
                secret_key=options["aws_secret_access_key"],
                session_token=options.get("aws_session_token"),
            )
        endpoint = options.get("aws_endpoint")
        if endpoint:
            proto, _, host = endpoint.partition("://")
            kw.update(endpoint_override=host.rstrip("/"), scheme=proto) if host else kw.update(
                endpoint_override=proto
            )
        client = fs.S3FileSystem(**{k: v for k, v in kw.items() if v is not None})
        below = "/".join(p for p in (base, prefix) if p)
        infos = client.get_file_info(
            fs.FileSelector(f"{bucket}/{below}" if below else bucket, recursive=True, allow_not_found=True)
        )
        n = len(bucket) + 1 + (len(base) + 1 if base else 0)
        files = [(i.path[n:], i.size, i.mtime) for i in infos if i.type == fs.FileType.File]
        folders = {i.path[n:] for i in infos if i.type == fs.FileType.Directory}
        return sorted(files, key=lambda f: f[0]), folders

    return keys


class Lister:
    """Lists prefixes of one store, each past the keys it cannot name. ``skipped`` collects ``(key or
    folder + "/", reason)`` of what was not listed, in the order met."""

    def __init__(self, store, raw: RawKeys | None = None):
        self.store = store
        self.raw = raw
        # A store opened at a prefix (``s3://bucket/runs``) takes keys below it but names a bad one whole.
        self.base = str(getattr(store, "prefix", None) or "").strip("/")
        self.skipped: list[tuple[str, str]] = []
        self.bad = 0
        self._gaps: set[str] = set()

    def all(self, prefix: str | None, offset: str | None = None) -> list[dict]:
        """Every object below ``prefix`` (after ``offset``), in the order listed; raises what obstore raises
        but an unnameable key."""
        import obstore

        out: list[dict] = []
        while True:
            last = offset
            try:
                for batch in obstore.list(self.store, prefix, offset=offset):
                    out += batch
                    if batch:
                        last = batch[-1]["path"]
                return out
            except Exception as e:
                key = self._key(e)
                found = bad_segment(key, prefix) if key is not None else None
                if found is None:
                    raise
                if self.raw is not None:
                    return self._raw(prefix, offset)
                if self.bad >= MAX_BAD_KEYS:
                    self.skipped.append(
                        (
                            f"{prefix}/" if prefix else "",
                            f"not listed past {key!r}: more than {MAX_BAD_KEYS} "
                            "keys the object store's client cannot name",
                        )
                    )
                    return out
                self.bad += 1
                self.skipped.append((key, reason(key, prefix)))
                folder, seg = found
                # The page holding the key is lost from ``last`` on: what lay in it before the key, folder
                # by folder; then the listing goes on past the key's bad segment (``a/..0``: after every
                # key below ``a/../``).
                out += self._before(prefix, last, key, folder)
                offset = f"{folder}/{seg}0" if folder else f"{seg}0"

    def _raw(self, prefix: str | None, offset: str | None) -> list[dict]:
        """Every object below ``prefix`` (after ``offset``) from the raw keys: those obstore cannot name are
        skipped and reported, and so is a directory marker (``name/``) beside the file ``name``."""
        files, folders = self.raw(prefix)
        names = {key for key, _, _ in files}
        out = []
        for key, size, modified in files:
            if offset is not None and key <= offset:
                continue
            if bad_segment(key, prefix) is not None:
                self.skipped.append((key, reason(key, prefix)))
                continue
            out.append({"path": key, "size": size, "last_modified": modified, "e_tag": None})
            if key in folders and not any(k.startswith(key + "/") for k in names):
                self.skipped.append((key + "/", MARKER))
        return out

    def _before(self, prefix: str | None, after: str | None, key: str, folder: str) -> list[dict]:
        """The objects below ``prefix`` after ``after`` and before ``key`` (whose bad segment is in
        ``folder``): each folder from ``prefix`` down to ``folder`` listed with its delimiter."""
        import obstore

        out: list[dict] = []
        level = prefix or ""
        below = folder[len(level) :].strip("/")
        chain = below.split("/") if below else []
        for depth in range(len(chain) + 1):
            child = None if depth == len(chain) else (f"{level}/{chain[depth]}" if level else chain[depth])
            if child is None:
                self._gap(level)  # its listing holds the key: names sorting before it cannot be listed
                break
            try:
                found = obstore.list_with_delimiter(self.store, level or None)
            except Exception as e:
                if self._key(e) is None:
                    raise
                self._gap(level)
            else:
                out += [
                    o for o in found["objects"] if (after is None or o["path"] > after) and o["path"] < key
                ]
                for sub in found["common_prefixes"]:
                    start = sub + "/"
                    if sub == child or start >= key:
                        continue  # the key's own folder (next), or one after the key (listed on)
                    inside = after is not None and after.startswith(start)
                    if after is not None and after > start and not inside:
                        continue  # listed before the page was lost
                    out += self.all(sub, offset=after if inside else None)
            level = child
        return out

    def _key(self, exc: Exception) -> str | None:
        """The key (below the store's own prefix) that made a listing fail, or None (another error)."""
        key = bad_key(exc)
        if key is None or not self.base:
            return key
        return key[len(self.base) + 1 :] if key.startswith(self.base + "/") else None

    def _gap(self, folder: str) -> None:
        if folder in self._gaps:
            return
        self._gaps.add(folder)
        self.skipped.append(
            (
                f"{folder}/" if folder else "",
                "files here may be missed: they sort just before a key the object store's client cannot "
                "name, and this folder's listing holds such a key",
            )
        )
