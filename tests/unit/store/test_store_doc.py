"""docs/store.md describes every file of a store: each file of a freshly ingested store (the demo run)
matches exactly one pattern of its table, and every registered derived kind has its row."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from data.demo import write_demo_run
from data.derived.registry import KINDS
from data.ingest import ingest_run

DOC = Path(__file__).resolve().parents[3] / "docs" / "store.md"


def _rows() -> list[tuple[str, str, str]]:
    """``(kind, pattern, format)`` of each row of the doc's table of files."""
    out = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[1].startswith("`"):
            out.append((cells[0], re.fullmatch(r"`([^`]+)`", cells[1]).group(1), cells[2]))
    return out


def test_storedoc001_every_file_of_a_fresh_store_is_listed_once(tmp_path):
    """Every file of a store ingested in two commits (the demo run, then more steps) matches exactly one
    listed pattern."""
    patterns = [p for _, p, _ in _rows()]
    assert len(patterns) == len(set(patterns)) > 10
    run = write_demo_run(tmp_path / "root", "demo", steps=4, per_step=16)
    ingest_run(run, tmp_path / "cache", ("<pad>",))
    write_demo_run(tmp_path / "root", "demo", steps=8, per_step=16)
    store_dir = ingest_run(run, tmp_path / "cache", ("<pad>",)).store_dir
    files = [p.relative_to(store_dir).as_posix() for p in store_dir.rglob("*") if p.is_file()]
    assert len(files) > 15
    for rel in files:
        hits = [p for p in patterns if fnmatch.fnmatchcase(rel, p)]
        assert len(hits) == 1, (rel, hits)


def test_storedoc002_every_derived_kind_has_its_row():
    """Each kind of data.derived.registry has the doc's row of its name, with its pattern and format."""
    rows = {kind: (pattern, fmt) for kind, pattern, fmt in _rows() if kind != "-"}
    assert set(rows) == {k.name for k in KINDS}
    for k in KINDS:
        assert rows[k.name] == (k.pattern, k.format), k.name
