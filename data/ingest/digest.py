"""A rollout file's full digest: a hash of every byte read of it, kept in its manifest entry (``digest``)
as a :class:`data.store.manifest.FileDigest`, and brought up to date as ingest reads on, so that it costs
the new bytes only (and at most one block read again); the whole file is hashed again only to check it, when its size is unchanged but its
modification time moved (an in-place edit of the same size, anywhere: the fingerprint samples only
some of the bytes, see _fingerprint below).

The digest is chained over blocks of :data:`BLOCK` bytes (``chain = H(chain + block)``), so the
state kept between two reads is one hash and the offset of the last whole block (``at``, ``chain``), and
ingest hashes the bytes it reads as it reads them (:class:`Running`);
``hash`` is the chain finished with the bytes from ``at`` to ``upto`` and the length ``upto``.

``H`` is SHA-256 cut to 128 bits (:func:`_hash`): as strong as the BLAKE2b-128 it replaced (a collision
costs ~2^64 work either way; an in-place edit is found whatever the bytes), and 2.4x faster where the CPU
computes SHA-256 itself (x86 SHA extensions: Intel since Ice Lake / Goldmont, AMD since Zen; ARMv8): 1.7
against 0.7 GB/s on this machine; a 223 MB rank file read in blocks and hashed, 0.30 -> 0.18 CPU-s (ingest's
digest at 256k responses: ~1.1 -> ~0.6 CPU-s). A CPU without them hashes SHA-256 at ~0.4-0.5 GB/s, slower
than BLAKE2b there; the digest must be one function on every replica of a store, so it is not chosen per host.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from data.remote import RemotePath
from data.store.manifest import DIGEST, FileDigest

BLOCK = 1 << 20  # bytes: what a read on re-hashes at most of what the last one hashed
_GET = 8 * BLOCK  # bytes per ranged GET of a file on an object store


def _pieces(path: Path, start: int, end: int):
    """The bytes of ``path`` from ``start`` to ``end``, in pieces of at most :data:`BLOCK` (a file that
    ends early yields less)."""
    if isinstance(path, RemotePath):
        for a in range(start, end, _GET):
            (data,) = path.get_ranges([(a, min(end, a + _GET))])
            for i in range(0, len(data), BLOCK):
                yield data[i : i + BLOCK]
        return
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0 and (data := f.read(min(BLOCK, left))):
            left -= len(data)
            yield data


def _hash(*pieces: bytes) -> bytes:
    """``H`` of the module docstring of the bytes ``pieces`` one after the other: SHA-256, its first 16 bytes."""
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.digest()[:16]


def _step(chain: bytes, block: bytes) -> bytes:
    return _hash(chain, block)


def _final(at: int, chain: bytes, tail: bytes, upto: int) -> FileDigest:
    """The digest of a file's first ``upto`` bytes: the chain to ``at`` finished with the ``tail`` after it
    and the length."""
    return FileDigest(at, chain.hex(), upto, _hash(chain, tail, upto.to_bytes(8, "little")).hex())


def _run(path: Path, at: int, chain: bytes, upto: int) -> FileDigest:
    """The digest of ``path``'s first ``upto`` bytes, hashed on from ``at`` (a block boundary, with the chain
    there)."""
    tail = b""
    for piece in _pieces(path, at, upto):
        if not tail and len(piece) == BLOCK:  # (the pieces are whole blocks but the last: no copy)
            chain = _step(chain, piece)
            at += BLOCK
            continue
        tail += piece
        while len(tail) >= BLOCK:
            chain, tail = _step(chain, tail[:BLOCK]), tail[BLOCK:]
            at += BLOCK
    return _final(at, chain, tail, upto)


class Running:
    """A file's digest brought up to date from the bytes ingest reads anyway (:meth:`feed`), so that a file
    is not read a second time to hash it: ``finish(entry, upto)`` leaves in ``entry`` the digest of the
    file's first ``upto`` bytes, brought up to date from the one it held (its last whole block on). Bytes
    not fed (the part block hashed last time, a line over the limit read past, a piece ingest skipped) are
    read from the file where they are missing (at most one block, but for a line over the limit); the bytes
    fed are the ones ingest parsed, so the digest vouches for what the store holds even when the file
    changed while it was read."""

    def __init__(self, path: Path, entry: dict) -> None:
        state = FileDigest.of(entry.get(DIGEST))
        self.path = path
        self.at, self.chain = (0, b"") if state is None else (state.at, bytes.fromhex(state.chain))
        self.tail = b""  # the bytes from ``at`` hashed so far, fewer than BLOCK
        self.lost = False  # the file ended before bytes fed began (cut while read): hashed anew at the end

    @property
    def end(self) -> int:
        """The offset up to which the file's bytes are taken in."""
        return self.at + len(self.tail)

    def feed(self, offset: int, data: bytes) -> None:
        """Take in the file's bytes ``data``, which start at ``offset``: what lies before them and was not
        taken in yet is read from the file first; what was taken in already is passed over."""
        if self.lost:
            return
        if offset > self.end:
            for piece in _pieces(self.path, self.end, offset):
                self._absorb(piece)
            if self.end < offset:  # the file ended early: the bytes fed cannot follow on
                self.lost = True
                return
        skip = self.end - offset
        if skip < len(data):
            self._absorb(memoryview(data)[skip:] if skip else data)

    def _absorb(self, data) -> None:
        view, i = memoryview(data), 0
        if self.tail:
            i = min(len(view), BLOCK - len(self.tail))
            self.tail += view[:i]
            if len(self.tail) < BLOCK:
                return
            self.chain, self.tail = _step(self.chain, self.tail), b""
            self.at += BLOCK
        while len(view) - i >= BLOCK:  # whole blocks straight from the bytes read (no copy)
            self.chain = _step(self.chain, view[i : i + BLOCK])
            self.at += BLOCK
            i += BLOCK
        if i < len(view):
            self.tail = bytes(view[i:])

    def finish(self, entry: dict, upto: int) -> None:
        """Leave in ``entry`` the digest of the file's first ``upto`` bytes."""
        self.feed(upto, b"")
        if self.lost or self.end > upto:  # cut while read, or more taken in than vouched for: hashed anew
            entry[DIGEST] = _run(self.path, 0, b"", upto).to_json()
            return
        entry[DIGEST] = _final(self.at, self.chain, self.tail, upto).to_json()


def unchanged(path: Path, entry: dict) -> bool:
    """Whether ``path``'s first bytes still hash to the digest in its manifest ``entry`` (False without one:
    nothing vouches for them). Reads all it covers: called only when a file's size is the same and its
    time moved."""
    state = FileDigest.of(entry.get(DIGEST))
    return state is not None and _run(path, 0, b"", state.upto).hash == state.hash


# A file's fingerprint (see _fingerprint): its first and last PRINT_WINDOW bytes up to where it was read, and
# PRINT_SAMPLES pieces of PRINT_SAMPLE bytes spread between them.
PRINT_WINDOW = 65536
PRINT_SAMPLES = 8
PRINT_SAMPLE = 4096


def _fingerprint(path: Path, upto: int) -> str:
    """A hash of what was read of a file (its first ``upto`` bytes): of all of it up to
    ``2 * PRINT_WINDOW + PRINT_SAMPLES * PRINT_SAMPLE`` bytes, else of its first and last ``PRINT_WINDOW``
    bytes and ``PRINT_SAMPLES`` pieces between. A file rewritten in place (a trainer restarted with the same
    seed reopens it with "w"), with the same start and no shorter, differs there, and most often just before
    where it was read to: the start alone took it as unchanged."""
    h = hashlib.blake2b(digest_size=16)
    if isinstance(path, RemotePath):  # the same bytes, fetched together (one GET each is a round trip each)
        for piece in path.get_ranges(_print_ranges(upto)):
            h.update(piece)
        return h.hexdigest()
    with open(path, "rb") as f:
        head = min(upto, PRINT_WINDOW)
        h.update(f.read(head))
        tail = max(head, upto - PRINT_WINDOW)
        if tail - head <= PRINT_SAMPLES * PRINT_SAMPLE:
            h.update(f.read(tail - head))
        else:
            for k in range(PRINT_SAMPLES):
                f.seek(head + (tail - head - PRINT_SAMPLE) * k // (PRINT_SAMPLES - 1))
                h.update(f.read(PRINT_SAMPLE))
            f.seek(tail)
        h.update(f.read(upto - tail))
    return h.hexdigest()


def _print_ranges(upto: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` ranges :func:`_fingerprint` hashes, in order."""
    head = min(upto, PRINT_WINDOW)
    tail = max(head, upto - PRINT_WINDOW)
    if tail - head <= PRINT_SAMPLES * PRINT_SAMPLE:
        middle = [(head, tail)]
    else:
        starts = [
            head + (tail - head - PRINT_SAMPLE) * k // (PRINT_SAMPLES - 1) for k in range(PRINT_SAMPLES)
        ]
        middle = [(a, a + PRINT_SAMPLE) for a in starts]
    return [(0, head), *middle, (tail, upto)]


def _file_changed(path: Path, st: os.stat_result, prev: dict) -> bool:
    """True when a file shrank, was replaced or was rewritten since it was last read (it is then read again
    from 0). Checked at every ingest, whatever its size and time say (see :func:`_fingerprint`)."""
    if st.st_size < prev["offset"]:
        return True
    if (st.st_dev, st.st_ino) != (prev.get("dev"), prev.get("ino")):
        return True
    return _fingerprint(path, prev["offset"]) != prev.get("print")


def _edited_in_place(path: Path, st: os.stat_result, prev: dict) -> bool:
    """True when a file read to its end before has the same size but another modification time, and what
    was read of it no longer hashes the same (an edit of the same size between the fingerprint's samples).
    Only then is the whole file hashed: a file that grew or was left alone costs nothing here."""
    if prev.get("size") != st.st_size or prev.get("mtime") in (None, st.st_mtime_ns):
        return False
    return not unchanged(path, prev)
