"""The pure parts of listing past keys obstore cannot name (data.remote_keys): which key a listing's error
names (Rust's debug quoting undone), which segment of it is bad, and where the listing starts again."""

from __future__ import annotations

import obstore.exceptions as ox

from data.remote_keys import bad_key, bad_segment, reason


def _error(quoted: str) -> ox.InvalidPathError:
    # As obstore words it: the message, then the error's debug text quoting the key.
    return ox.InvalidPathError(
        f"Encountered object with invalid path: …\n\nDebug source:\nInvalidPath {{\n    source: BadSegment "
        f'{{\n        path: "{quoted}",\n        source: InvalidPart {{ segment: ".." }}'
    )


def test_remotekeys001_key_of_the_error():
    """The key as the error's debug text quotes it, with ``\\"``, ``\\\\`` and ``\\u{…}`` undone; None for
    another error (a refused request is no bad key)."""
    assert bad_key(_error("root/good/../d.jsonl")) == "root/good/../d.jsonl"
    assert bad_key(_error(r"r/q\"\\x\u{1b}/../y")) == 'r/q"\\x\x1b/../y'
    assert bad_key(ox.PermissionDeniedError("status code: 403")) is None
    assert bad_key(ox.InvalidPathError("no debug text")) is None


def test_remotekeys002_bad_segment_and_its_folder():
    """The first empty, ``.`` or ``..`` segment below the listed prefix and the folder holding it; a key
    with none (or not below the prefix) has none."""
    assert bad_segment("root/good/../d.jsonl", "root") == ("root/good", "..")
    assert bad_segment("root/good/a//b.jsonl", "root/good") == ("root/good/a", "")
    assert bad_segment("root//x", "root") == ("root", "")
    assert bad_segment("./x", None) == ("", ".")
    assert bad_segment("a/b/.", "a") == ("a/b", ".")
    assert bad_segment("root/good/x.jsonl", "root") is None
    assert bad_segment("other/../x", "root") is None
    assert (
        reason("root/a//b", "root")
        == "a key with an empty segment (//), which the object store's client cannot name"
    )
    assert (
        reason("root/../b", "root")
        == "a key with a '..' segment, which the object store's client cannot name"
    )
