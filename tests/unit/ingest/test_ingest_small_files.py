"""A run of many small files (veRL writes one per step): their rows share files in the store, and read,
drop and export exactly as when each file had its own."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from data.export import export_batches
from data.ingest import ingest_run, part_files
from data.queries import ResponseFilter
from data.store import open_store

PADS = ("<pad>",)
FILES = 120


def _line(step: int, i: int = 0, **kw) -> str:
    rec = {"input": f"prompt {step}-{i}", "output": f"answer {step}-{i}", "score": step % 3 / 2, "step": step}
    return json.dumps({**rec, **kw}) + "\n"


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for step in range(1, FILES + 1):
        text = _line(step)
        if step == 40:
            text += _line(step, 1) + '{"input": "cut\n'  # a bad line beside a good one
        if step == 41:
            text = _line(step, logprobs=[-0.5, -1.0], response_tokens=["a"])  # a data-quality note
        (run / f"{step}.jsonl").write_text(text)
    return run


def _view(store) -> pl.DataFrame:
    """Every row as a reader sees it, with its texts read back through its part (not part and row)."""
    sc = store.scalars().sort("source", "line")
    texts = [store.sample(s)["response"] for s in sc.get_column("sample_id")]
    keep = ["sample_id", "source", "line", "step", "reward", "response_preview"]
    return sc.select(keep).with_columns(pl.Series("response", texts))


def _issues(store) -> list[tuple]:
    return store.issues().select("source", "line", "severity", "reason").sort("source", "line").rows()


def _alone(tmp_path: Path, run: Path, monkeypatch, name: str):
    """The same run stored with a part per file (as before), for comparison."""
    with monkeypatch.context() as m:
        m.setattr(part_files, "SHARE_AT", 10**9)
        return open_store(ingest_run(run, tmp_path / name, PADS).store_dir)


def test_smallfiles001_small_files_share_part_files(tmp_path, monkeypatch):
    """120 one-line files are stored in a few files of rows (before: one each, plus a scalars file each,
    and a pack of those at the end), and every row, text, note and unusable line reads as with a part per
    file."""
    run = _run(tmp_path)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert len(list((store.dir / "parts").glob("*/*.parquet"))) <= 3
    assert len(list((store.dir / "scalars").glob("*.parquet"))) <= 3
    alone = _alone(tmp_path, run, monkeypatch, "alone")
    assert len(list((alone.dir / "parts").glob("*/*.parquet"))) == FILES
    assert _view(store).equals(_view(alone))
    assert _issues(store) == _issues(alone)
    assert ("40.jsonl", 3, "error") in [r[:3] for r in _issues(store)]
    assert ("41.jsonl", 1, "note") in [r[:3] for r in _issues(store)]
    rows = pl.concat(export_batches(store, ResponseFilter(q="answer 1[0-9]-")))
    assert sorted(rows.get_column("response").to_list()) == [f"answer {s}-0" for s in range(10, 20)]


def test_smallfiles002_files_removed_rewritten_and_added(tmp_path, monkeypatch):
    """Removing the file whose rows opened a shared file, rewriting another and adding one gives the rows
    of a fresh read; the shared file stays while other parts use it, and a search finds no text of a
    removed or rewritten line."""
    run = _run(tmp_path)
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS)
    (run / "1.jsonl").unlink()  # the first part: its file holds the others' rows too
    (run / "7.jsonl").write_text(_line(7, 0, output="rewritten seven", score=5))
    (run / "301.jsonl").write_text(_line(301))
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    fresh = _alone(tmp_path, run, monkeypatch, "fresh")
    assert _view(store).equals(_view(fresh))
    assert _issues(store) == _issues(fresh)
    hits = pl.concat(export_batches(store, ResponseFilter(q="^answer (1|7)-0$")))
    assert hits.get_column("response").to_list() == []
    again = pl.concat(export_batches(store, ResponseFilter(q="seven")))
    assert again.get_column("response").to_list() == ["rewritten seven"]
