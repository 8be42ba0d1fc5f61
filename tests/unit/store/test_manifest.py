"""The typed manifest (data.store.manifest.Manifest): read from a committed store's bytes, written back to
the same bytes, every derived kind under ``derived``, and a key it does not know refused."""

from __future__ import annotations

import orjson
import pytest

from data.demo import write_demo_run
from data.ingest import ingest_run
from data.store import open_store
from data.store.manifest import MANIFEST, DerivedEntry, Manifest

PADS = ("<pad>",)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("manifest")
    run = write_demo_run(tmp / "root", "demo", steps=4, per_step=16)
    return open_store(ingest_run(run, tmp / "cache", PADS).store_dir)


def test_manifest001_bytes_round_trip(store):
    """The manifest of a fresh store is read from its file, and what it writes reads back the same, every
    key of the file kept (with its value)."""
    raw = (store.dir / MANIFEST).read_bytes()
    m = Manifest.from_bytes(raw)
    assert m == store.manifest
    assert Manifest.from_bytes(m.to_bytes()) == m
    data, written = orjson.loads(raw), orjson.loads(m.to_bytes())
    assert {k: written[k] for k in data} == data


def test_manifest002_every_derived_kind_typed(store):
    """Each derived file a commit writes is named under ``derived``, its file on disk."""
    m = store.manifest
    assert set(m.derived) == {
        "steps",
        "cells",
        "ends",
        "prompts",
        "matches",
        "facts",
        "tokscale",
        "pidx",
        "topk",
        "texttop",
    }
    for kind, entry in m.derived.items():
        assert isinstance(entry, DerivedEntry)
        if entry.name is not None:
            assert (store.dir / entry.name).is_file(), kind
    assert all((store.dir / f["name"]).is_file() for f in m.derived["pidx"].meta["files"])
    assert m.derived["prompts"].meta["threshold"] is not None
    assert m.without("cells").derived_name("cells") is None and m.derived_name("cells")


def test_manifest003_an_unknown_key_is_refused(store):
    """A key the manifest does not know (a store written by another version) is refused, not guessed at."""
    data = orjson.loads((store.dir / MANIFEST).read_bytes())
    with pytest.raises(ValueError, match="not known"):
        Manifest.from_dict({**data, "from_the_future": 1})


def test_manifest004_every_file_has_its_typed_digest(store):
    """Each rollout file read to its end has its full digest in its entry, typed (``file_digest``), covering
    the bytes read of it; a malformed digest is refused, not guessed at."""
    from data.ingest.digest import _run
    from data.store.manifest import FileDigest

    m = store.manifest
    assert m.files
    run_dir = store.manifest.run_path
    for rel, entry in m.files.items():
        d = m.file_digest(rel)
        assert isinstance(d, FileDigest) and d.upto == entry["offset"] == entry["size"]
        assert _run(f"{run_dir}/{rel}", 0, b"", d.upto) == d
    data = orjson.loads((store.dir / MANIFEST).read_bytes())
    rel = next(iter(data["files"]))
    for bad in ([1, "zz", 2, "00" * 16], [3, "", 2, "00" * 16], "abc", [0, "", 0]):
        files = {**data["files"], rel: {**data["files"][rel], "digest": bad}}
        with pytest.raises(ValueError, match="digest"):
            Manifest.from_dict({**data, "files": files})
