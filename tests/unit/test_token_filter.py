"""The token filter (``tok=…&tok_metric=…&tok_min=…&tok_max=…``) on the real TRL GRPO fixture, against a hand
computation with numpy over its JSON lines: the responses it keeps, where their first kept token is and
its value, in the page's data function and in ``/export``; bounds inclusive; the cut-off at the search's
time limit; the URL's keys and the token page's ``pos=``.

The per-token KL is TRL's own k3 (huggingface/trl ``trl/trainer/grpo_trainer.py`` lines 3071-3072 at
f2cd577: ``torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1``),
and the token strings are the file's ``response_tokens`` (``convert_ids_to_tokens``: ``Ġ.``, not `` .``).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from data import export, responses
from data.ingest import ingest_run
from data.run_context import steps_of
from data.search import tokens as token_filter
from data.store import open_store
from data.views import links
from data.views.codec import parse_search
from data.views.responses import ResponsesView
from data.views.tokens import TokensState

PADS = ("<pad>",)
RUN = "trl-grpo-small"
FINAL_DOT = r"^Ġ\.$"


@pytest.fixture(scope="module")
def store(fixtures_dir, tmp_path_factory):
    return open_store(ingest_run(fixtures_dir / RUN, tmp_path_factory.mktemp("tok"), PADS).store_dir)


def records(fixtures_dir: Path):
    """``(source, line, record)`` of every line of the fixture's rank files."""
    for name in ("rank0.jsonl", "rank1.jsonl"):
        with open(fixtures_dir / RUN / name) as f:
            for i, line in enumerate(f, start=1):
                yield name, i, json.loads(line)


def by_hand(fixtures_dir: Path, pattern: str, lo: float | None, hi: float | None, step=None) -> dict:
    """``{(source, line): (first position, its k3)}`` of the responses holding a token matching ``pattern``
    with ``lo <= k3 <= hi``: numpy over the file, TRL's k3 formula."""
    out = {}
    for source, line, rec in records(fixtures_dir):
        if step is not None and rec["step"] != step:
            continue
        lp, ref = np.asarray(rec["logprobs"]), np.asarray(rec["ref_logprobs"])
        k3 = np.exp(ref - lp) - (ref - lp) - 1
        kept = [
            p
            for p, tok in enumerate(rec["response_tokens"])
            if re.search(pattern, tok) and (lo is None or k3[p] >= lo) and (hi is None or k3[p] <= hi)
        ]
        if kept:
            out[(source, line)] = (kept[0], float(k3[kept[0]]))
    return out


def page(store, query: str) -> dict:
    """What the responses page's grid shows for ``query``: ``{(source, line): (tok_pos, tok_value)}``."""
    view, notes = ResponsesView.from_query(parse_search(query), None, responses.sortable_columns(store))
    assert notes == []
    flt = view.response_filter(steps_of(store))
    df, count = responses.page_rows(store, flt, view.sort, view.descending, 0, 1000, 30.0)
    assert count == df.height
    out = {}
    for row in df.iter_rows(named=True):
        source, line = row["source_line"].rsplit(":", 1)
        out[(source, int(line))] = (row["tok_pos"], row["tok_value"])
    return out


def exported(store, query: str) -> dict:
    """The same view's CSV export: ``{(source, line): (tok_pos, tok_value)}``."""
    view, _ = ResponsesView.from_query(parse_search(query), None, responses.sortable_columns(store))
    flt = view.response_filter(steps_of(store))
    body = b"".join(export.export_stream(store, flt, "csv", view.sort, view.descending, 30.0, 120.0))
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    return {(r["source"], int(r["line"])): (int(r["tok_pos"]), float(r["tok_value"])) for r in rows}


def same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, (pos, value) in want.items():
        assert got[k][0] == pos
        assert got[k][1] == pytest.approx(value, rel=1e-9)


def test_tokfilter001_done_when_url(store, fixtures_dir):
    """``tok=^Ġ\\.$&tok_metric=kl&tok_min=100``: exactly the responses computed by hand, in the page's data
    function and in the export (none in this run: its largest k3 on a final " ." is 21.9)."""
    query = "step=all&tok=%5E%C4%A0%5C.%24&tok_metric=kl&tok_min=100"
    want = by_hand(fixtures_dir, FINAL_DOT, 100, None)
    same(page(store, query), want)
    same(exported(store, query), want)


def test_tokfilter002_final_dot_with_large_kl(store, fixtures_dir):
    """A bound that keeps some responses (k3 >= 5 on " ."): the same six as by hand, with the position
    of each one's first such token and its k3, in the page (sorted by KL sum too) and the export."""
    want = by_hand(fixtures_dir, FINAL_DOT, 5, None)
    assert len(want) == 6
    for query in (
        "step=all&tok=%5E%C4%A0%5C.%24&tok_min=5",
        "step=all&tok=%5E%C4%A0%5C.%24&tok_min=5&sort=kl_sum",
    ):
        same(page(store, query), want)
        same(exported(store, query), want)


def test_tokfilter003_bounds_inclusive(store, fixtures_dir):
    """``tok_min = tok_max = `` a kept token's own k3 keeps its response: both bounds are inclusive."""
    (key, (pos, value)), *_ = sorted(by_hand(fixtures_dir, FINAL_DOT, 20, None).items())
    query = f"step=all&tok=%5E%C4%A0%5C.%24&tok_min={value!r}&tok_max={value!r}"
    got = page(store, query)
    assert got == {key: (pos, pytest.approx(value, rel=1e-12))}


def test_tokfilter004_one_step_no_bounds(store, fixtures_dir):
    """Without bounds: every response of the step holding a matching token, at its first one."""
    want = by_hand(fixtures_dir, r"^Ġgood$", None, None, step=7)
    assert want
    same(page(store, "step=7&tok=%5E%C4%A0good%24"), want)
    same(exported(store, "step=7&tok=%5E%C4%A0good%24"), want)
    # In file order (no sort), the export reads windows of steps: the step's matches still, all of them.
    view, _ = ResponsesView.from_query(parse_search("step=7&tok=%5E%C4%A0good%24"))
    flt = view.response_filter(steps_of(store))
    body = b"".join(export.export_stream(store, flt, "csv", None, False, 30.0, 120.0)).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert {(r["source"], int(r["line"])) for r in rows} == set(want)


def test_tokfilter005_cut_off(store):
    """A filter given no time reads no file: its rows are none and it says it was cut off, and the export
    says so in its last line."""
    view, _ = ResponsesView.from_query(parse_search("step=all&tok=x"))
    flt = view.response_filter(steps_of(store))
    hits = token_filter.token_hits(store, flt, 0.0)
    assert hits.cut and hits.frame.height == 0
    assert "cut off" in hits.notice("x") and f"0 of the run's {hits.files}" in hits.notice("x")
    body = b"".join(export.export_stream(store, flt, "csv", None, False, 0.0, 60.0)).decode()
    assert body.rstrip("\n").splitlines()[-1].startswith('"' + export.INCOMPLETE_MARK)


def test_tokfilter006_url_keys():
    """The URL's token keys read back as written; a bad metric or an invalid pattern says so."""
    q = "run=r&tok=%5E%C4%A0%5C.%24&tok_metric=log_ratio&tok_min=-1&tok_max=2.5"
    view, notes = ResponsesView.from_query(parse_search(q))
    assert notes == [] and (view.tok, view.tok_metric, view.tok_min, view.tok_max) == (
        FINAL_DOT,
        "log_ratio",
        -1,
        2.5,
    )
    assert ResponsesView.from_query(parse_search(view.to_query()))[0] == view
    assert view.token_words() == "a token matching “^Ġ\\.$” with -1 ≤ log-ratio log π − log π_ref ≤ 2.5"
    bad, notes = ResponsesView.from_query(parse_search("tok=(&tok_metric=nope"))
    assert len(notes) == 2 and bad.response_filter([1]).tok is None


def test_tokfilter007_row_opens_token_page_at_position():
    """A row of a token filter opens the token page at its token (``pos=``), coloured by the filter's
    metric; the token page reads ``pos`` back and refuses a negative one."""
    view = ResponsesView(run="r", step=3, tok=FINAL_DOT, tok_metric="kl", tok_min=100.0)
    href = links.row_tokens(view, "s1", pos=12)
    state, notes = TokensState.from_query(parse_search(href.split("?", 1)[1]))
    assert notes == [] and state.pos == 12 and state.sample == "s1" and state.metric == "kl"
    assert "tok=" in state.back and "sample=s1" in state.back
    assert TokensState.from_query({"pos": "-1"})[0].pos is None


def test_tokfilter008_without_the_index_the_same(store, fixtures_dir, monkeypatch):
    """A store whose token files are missing decodes the parts' strings in the search helper instead: the
    same responses, positions and values as by hand."""
    monkeypatch.setattr(token_filter.token_index, "token_files", lambda *a: None)
    view, _ = ResponsesView.from_query(parse_search("step=all&tok=%5E%C4%A0%5C.%24&tok_min=5"))
    hits = token_filter.token_hits(store, view.response_filter(steps_of(store)), 30.5)
    assert not hits.cut
    keys = store.read_keys(hits.frame.select("part", "row"), ["source", "line"])
    got = {
        (s, ln): (p, v)
        for s, ln, p, v in zip(
            keys["source"], keys["line"], hits.frame["tok_pos"], hits.frame["tok_value"], strict=True
        )
    }
    same(got, by_hand(fixtures_dir, FINAL_DOT, 5, None))


def test_tokfilter009_token_files_hold_the_files_tokens(store, fixtures_dir):
    """Each token file numbers its rows' token strings into its vocabulary: read back, they are the file's
    ``response_tokens`` line by line (and the vocabulary is the file's distinct strings, sorted)."""
    from data.derived import tokens as token_index

    want = {(s, ln): rec["response_tokens"] for s, ln, rec in records(fixtures_dir)}
    files = store.part_files()
    index = token_index.token_files(store.dir, files)
    assert index is not None and len(index) == len(files) == 2
    seen = 0
    for src, path in zip(files, index, strict=True):
        vocab = token_index.vocabulary(path)
        assert vocab == sorted(set(vocab))
        table = pl.read_ipc(path)
        lines = pl.read_parquet(src, columns=["part", "row", "source", "line"])
        for (part, row, ids), (part2, row2, source, line) in zip(
            table.select("part", "row", "ids").iter_rows(), lines.iter_rows(), strict=True
        ):
            assert (part, row) == (part2, row2)
            assert [vocab[i] for i in ids] == want[(source, line)]
            seen += 1
    assert seen == 400


def test_tokfilter010_summary_says_cut(store):
    """The warning beside the page's count names a token filter cut off at the time limit, and nothing for
    one that read every file."""
    view, _ = ResponsesView.from_query(parse_search("step=all&tok=%5E%C4%A0%5C.%24&tok_min=5"))
    steps = steps_of(store)
    assert "was cut off after 0 s" in responses.summary_note(store, view, steps, 0.0)
    assert responses.summary_note(store, view, steps, 30.0) is None
