"""A line's fate does not depend on its neighbours: each case below is read the same whichever path takes
its chunk (Polars in one call, line by line beside a bad line, one record at a time for a line with a NaN
literal, several small files parsed together)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>",)
PATHS = ("whole", "beside-a-bad-line", "with-nan", "small-files")


def rec(**kw) -> dict:
    return {"prompt": "p", "response": "r", "reward": 1.0, "step": 1, **kw}


def _ingest(tmp_path: Path, lines: list[str], path: str):
    """Ingest ``lines`` (JSON texts) read by ``path``; returns the store and the line numbers of ``lines``
    (in their file; with "small-files" each is line 1 of its own file)."""
    run = tmp_path / "run"
    run.mkdir()
    good = json.dumps(rec())
    if path == "with-nan":
        lines = [text[:-1] + ', "nan_extra": NaN}' for text in lines]
    if path == "small-files":
        for i, text in enumerate([good, *lines]):
            (run / f"step_{i:03d}.jsonl").write_text(text + "\n")
    else:
        body = [good, *lines] + ([json.dumps(rec(reward="bad"))] if path == "beside-a-bad-line" else [])
        (run / "rank0.jsonl").write_text("\n".join(body) + "\n")
    res = ingest_run(run, tmp_path / "cache", PADS)
    return open_store(res.store_dir)


def _rows(store) -> list[dict]:
    """The rows kept, but for the good first line, in file order."""
    sc = store.scalars().sort("source", "line")
    return sc.slice(1).to_dicts()


def _errors(store) -> list[str]:
    issues = store.issues()
    return [
        r["reason"]
        for r in issues.iter_rows(named=True)
        if r["severity"] == "error" and "'reward'" not in r["reason"]
    ]


@pytest.mark.parametrize("path", PATHS)
def test_onerule001_steps_at_the_ends_of_64_bits(tmp_path, path):
    """The largest and the smallest 64-bit steps are kept as they are; one past them (or a float that
    large) is out of range. (Before, 2**63 - 1 was out of range in a chunk read whole, and kept line by
    line.)"""
    steps = [2**63 - 1, -(2**63), 2**63, 1e19]
    store = _ingest(tmp_path, [json.dumps(rec(step=s)) for s in steps], path)
    assert [r["step"] for r in _rows(store)] == [2**63 - 1, -(2**63)]
    assert _errors(store) == ["field 'step' is out of range (not a 64-bit integer)"] * 2


@pytest.mark.parametrize("path", PATHS)
def test_onerule002_an_empty_key_is_the_column_extra_(tmp_path, path):
    """An extra field with an empty name is the column ``extra_`` everywhere: in the responses table and
    in the response's full row (before, it was a column without a name, which reading the part named
    ``column_12``)."""
    store = _ingest(tmp_path, [json.dumps(rec(**{"": 5}))], path)
    (row,) = _rows(store)
    assert row["extra_"] == 5 and "" not in row
    full = store.sample(row["sample_id"])
    assert full["extra_"] == 5 and not any(k.startswith("column_") or k == "" for k in full)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("order", ["key-first", "object-first"])
def test_onerule003_a_name_given_twice_keeps_the_key_and_says_so(tmp_path, path, order):
    """``{"a.b": 1, "a": {"b": 2}}`` names ``a.b`` twice: the key as written wins over the name made of
    the object's field, whichever comes first, and the line gets a note naming the value left out (before,
    one of the two values was lost silently, which one depending on their order)."""
    fields = [("a.b", 1), ("a", {"b": 2})]
    if order == "object-first":
        fields.reverse()
    store = _ingest(tmp_path, [json.dumps(rec(**dict(fields)))], path)
    (row,) = _rows(store)
    assert row["a.b"] == 1
    notes = store.issues().filter(severity="note").to_dicts()
    ours = [n for n in notes if "given twice" in n["reason"]]
    assert len(ours) == 1 and ours[0]["line"] == row["line"] and ours[0]["source"] == row["source"]
    assert "'a.b'" in ours[0]["reason"]
