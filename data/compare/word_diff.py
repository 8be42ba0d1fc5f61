"""A word-level diff of two responses, kept exact: the segments that rebuild each text, the tails beyond
:data:`MAX_DIFF_TOKENS` words and spaces given undiffed."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

# The word diff compares at most this many words and spaces of each response (difflib is quadratic in
# the worst case); the rest is shown undiffed, with a note.
MAX_DIFF_TOKENS = 4000


_TOKENS = re.compile(r"\s+|[^\s]+")


@dataclass(frozen=True)
class WordDiff:
    """``segments``: ``(op, text)`` in order, ``op`` ``"equal"`` (in both), ``"delete"`` (only in the
    first text) or ``"insert"`` (only in the second); the ``equal`` and ``delete`` texts joined give the
    first text back, the ``equal`` and ``insert`` texts the second. ``truncated``: the texts were longer
    than :data:`MAX_DIFF_TOKENS` words and spaces, and their tails are given as a delete and an insert."""

    segments: tuple[tuple[str, str], ...]
    truncated: bool = False


def word_diff(first: str, second: str, limit: int = MAX_DIFF_TOKENS) -> WordDiff:
    """Word-level diff of two texts (``difflib.SequenceMatcher`` without its junk heuristic, on words and
    runs of white space, so the texts are rebuilt exactly); a replaced stretch is a delete then an
    insert."""
    a, b = _TOKENS.findall(first or ""), _TOKENS.findall(second or "")
    truncated = len(a) > limit or len(b) > limit
    a_tail, b_tail = "".join(a[limit:]), "".join(b[limit:])
    a, b = a[:limit], b[:limit]
    out: list[tuple[str, str]] = []

    def add(op: str, text: str) -> None:
        if not text:
            return
        if out and out[-1][0] == op:
            out[-1] = (op, out[-1][1] + text)
        else:
            out.append((op, text))

    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            add("equal", "".join(a[i1:i2]))
        else:
            add("delete", "".join(a[i1:i2]))
            add("insert", "".join(b[j1:j2]))
    add("delete", a_tail)
    add("insert", b_tail)
    return WordDiff(tuple(out), truncated)
