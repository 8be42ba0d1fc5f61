"""A rollout file's full digest: a hash of every byte read of it, kept in its manifest entry (``digest``)
as a :class:`data.store.manifest.FileDigest`, and brought up to date as ingest reads on, so that it costs the new bytes only (and at most one block
read again); the whole file is hashed again only to check it, when its size is unchanged but its
modification time moved (an in-place edit of the same size, anywhere: the fingerprint samples only
some of the bytes, see data.ingest.files._fingerprint).

The digest is chained over blocks of :data:`BLOCK` bytes (``chain = blake2b(chain + block)``), so the
state kept between two reads is one hash and the offset of the last whole block (``at``, ``chain``);
``hash`` is the chain finished with the bytes from ``at`` to ``upto`` and the length ``upto``.
"""

from __future__ import annotations

import hashlib
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


def _step(chain: bytes, block: bytes) -> bytes:
    h = hashlib.blake2b(chain, digest_size=16)
    h.update(block)
    return h.digest()


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
    final = hashlib.blake2b(chain + tail, digest_size=16)
    final.update(upto.to_bytes(8, "little"))
    return FileDigest(at, chain.hex(), upto, final.hexdigest())


def extended(path: Path, entry: dict, upto: int) -> None:
    """Bring the digest in a file's manifest ``entry`` up to its first ``upto`` bytes: only the bytes past
    the last whole block it hashed are read (all of them when it has none)."""
    state = FileDigest.of(entry.get(DIGEST))
    if state is None or state.at > upto:
        state = _run(path, 0, b"", upto)
    else:
        state = _run(path, state.at, bytes.fromhex(state.chain), upto)
    entry[DIGEST] = state.to_json()


def unchanged(path: Path, entry: dict) -> bool:
    """Whether ``path``'s first bytes still hash to the digest in its manifest ``entry`` (False without one:
    nothing vouches for them). Reads all it covers: called only when a file's size is the same and its
    time moved."""
    state = FileDigest.of(entry.get(DIGEST))
    return state is not None and _run(path, 0, b"", state.upto).hash == state.hash
