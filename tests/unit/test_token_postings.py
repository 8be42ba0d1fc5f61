"""The token index's postings (:mod:`data.derived.tokens`): a token rare in a file is answered from its
postings, with the same responses, positions and values as a hand computation over the JSON lines (TRL's
k3, see ``test_token_filter``'s docstring for the trainer's source) and as the paths without postings (a
file's rows read through its token numbers, and the parts' strings decoded: an older store's).

On the real TRL GRPO run with every token posted and with none; on a generated run with a planted token
in ~1 % of responses, posted as ingest writes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from benchmarks.generate import generate
from data.derived import tokens as token_index
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.search import tokens as token_filter
from data.store import open_store
from tests.unit.test_token_filter import FINAL_DOT, PADS, RUN, by_hand, same

RARE = "Ġzyzzyva"


def ingested(src: Path, dst: Path, share: float | None = None):
    """The store of the run folder ``src``, its postings written for tokens in <= ``share`` of a file's
    rows, within ``share`` of its positions (ingest's own limits for None)."""
    with pytest.MonkeyPatch.context() as mp:
        if share is not None:
            mp.setattr(token_index, "POSTED_SHARE", share)
            mp.setattr(token_index, "POSTED_BUDGET", share)
        return open_store(ingest_run(src, dst, PADS).store_dir)


@pytest.fixture(scope="module")
def trl(fixtures_dir, tmp_path_factory):
    """The TRL run's store twice: every token posted, and none (the token numbers read instead)."""
    return {
        "all": ingested(fixtures_dir / RUN, tmp_path_factory.mktemp("all"), 1.0),
        "none": ingested(fixtures_dir / RUN, tmp_path_factory.mktemp("none"), 0.0),
    }


def by_line(store, flt: ResponseFilter) -> dict:
    """The filter's hits as ``{(source, line): (tok_pos, tok_value)}`` (read every file)."""
    hits = token_filter.token_hits(store, flt, 60.0)
    assert not hits.cut
    keys = store.read_keys(hits.frame.select("part", "row"), ["source", "line"])
    rows = zip(keys["source"], keys["line"], hits.frame["tok_pos"], hits.frame["tok_value"], strict=True)
    return {(s, ln): (p, v) for s, ln, p, v in rows}


def posted_files(store) -> list[tuple[list[str], frozenset[int], Path]]:
    files = token_index.token_files(store.dir, store.part_files())
    assert files is not None
    return [(*token_index.vocabulary_posted(p), token_index.postings_of(p)) for p in files]


def test_postings001_every_or_no_token_posted(trl):
    """With a share of 1 every token of a file is posted and its postings file is there; with 0 none is,
    and there is no postings file."""
    for vocab, posted, post in posted_files(trl["all"]):
        assert posted == frozenset(range(len(vocab))) and post.exists()
    for vocab, posted, post in posted_files(trl["none"]):
        assert vocab and not posted and not post.exists()


@pytest.mark.parametrize("mode", ["all", "none"])
@pytest.mark.parametrize(
    "pattern, lo, hi, step",
    [
        (FINAL_DOT, 5, None, None),
        (FINAL_DOT, 100, None, None),
        (FINAL_DOT, 1.0, 20.0, None),
        (r"^Ġgood$", None, None, 7),
    ],
)
def test_postings002_trl_by_hand(trl, fixtures_dir, mode, pattern, lo, hi, step):
    """The filter's responses, first positions and k3 equal the hand computation, from the postings and
    from the token numbers alike."""
    flt = ResponseFilter(step=step, tok=pattern, tok_metric="kl", tok_min=lo, tok_max=hi)
    want = by_hand(fixtures_dir, pattern, lo, hi, step)
    if lo != 100:
        assert want
    same(by_line(trl[mode], flt), want)


@pytest.mark.parametrize("metric", token_index.POSTED_METRICS)
def test_postings003_every_metric_as_the_rows_give_it(trl, metric):
    """For every metric the filter offers, the postings answer what reading the rows answers (the same
    rows, positions, values and counts), with a bound at the metric's median and with none."""
    flt = ResponseFilter(tok=r"^Ġ(the|a|\.)$", tok_metric=metric)
    free = token_filter.token_hits(trl["none"], flt, 60.0).frame
    assert free.height > 0
    assert_frame_equal(token_filter.token_hits(trl["all"], flt, 60.0).frame, free)
    median = free.get_column("tok_value").drop_nans().median()
    if median is None:  # a metric the run does not have (no value, no inference log-prob)
        return
    flt = ResponseFilter(tok=r"^Ġ(the|a|\.)$", tok_metric=metric, tok_min=median)
    want = token_filter.token_hits(trl["none"], flt, 60.0).frame
    assert 0 < want.height < free.height
    assert_frame_equal(token_filter.token_hits(trl["all"], flt, 60.0).frame, want)


def test_postings004_collect_keeps_a_live_parts_postings(trl):
    """Collecting the token folder keeps the postings of files still in ``parts/`` (their name has one
    more dot than a token file's)."""
    store = trl["all"]
    before = sorted((store.dir / token_index.FOLDER).glob("*.arrow"))
    token_index.collect(SimpleNamespace(dir=store.dir), None)
    assert sorted((store.dir / token_index.FOLDER).glob("*.arrow")) == before
    assert any(p.name.endswith(".post.arrow") for p in before)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A generated run (3 steps of 1,024 responses over 2 files) with ``RARE`` in ~1 % of responses."""
    run = tmp_path_factory.mktemp("gen") / "run"
    generate(run, steps=3, per_step=1024, tokens=40, ranks=2, rare=(RARE, 0.01))
    return run, ingested(run, tmp_path_factory.mktemp("gen-store"))


def planted_by_hand(run: Path, lo: float | None) -> dict:
    """``{(source, line): (first position of RARE with k3 >= lo, its k3)}``: numpy over the JSON lines (the
    log-probs as Float32, the parts' type)."""
    out = {}
    for name in ("rank0.jsonl", "rank1.jsonl"):
        for i, line in enumerate((run / name).read_text().splitlines(), start=1):
            rec = json.loads(line)
            # As the store holds them: Float32 (k3 of a nearly equal pair is mostly rounding otherwise).
            lp, ref = (
                np.asarray(rec[f], dtype=np.float32).astype(np.float64) for f in ("logprobs", "ref_logprobs")
            )
            k3 = np.exp(ref - lp) - (ref - lp) - 1
            kept = [
                p
                for p, tok in enumerate(rec["response_tokens"])
                if re.fullmatch(RARE, tok) and (lo is None or (p < len(k3) and k3[p] >= lo))
            ]
            if kept:
                out[(name, i)] = (kept[0], float(k3[kept[0]]) if kept[0] < len(k3) else None)
    return out


def test_postings005_planted_rare_token(planted, monkeypatch):
    """The planted token is posted in every file as ingest writes it; the filter on it (k3 >= the median of
    its k3s by hand, and no bound) equals the hand computation, as does the scan of an older store without
    token files."""
    run, store = planted
    for vocab, posted, _ in posted_files(store):
        assert vocab.index(RARE) in posted
    everywhere = planted_by_hand(run, None)
    assert 0.005 * 3072 < len(everywhere) < 0.02 * 3072
    lo = float(np.median([v for _, v in everywhere.values()]))
    want = planted_by_hand(run, lo)
    assert 0 < len(want) < len(everywhere)
    for bound, expected in ((lo, want), (None, everywhere)):
        same(by_line(store, ResponseFilter(tok=f"^{RARE}$", tok_metric="kl", tok_min=bound)), expected)
    monkeypatch.setattr(token_filter.token_index, "token_files", lambda *a: None)
    same(by_line(store, ResponseFilter(tok=f"^{RARE}$", tok_metric="kl", tok_min=lo)), want)


def test_postings007_budget_posts_the_rarest_first():
    """Within the budget, the rarest tokens of a file are posted first and no more positions than the
    budget allows; a token above the row share is never posted."""
    # 100 rows of 10 tokens: id 0 in every row, id 1 in 1 row, id 2 in 2 rows (twice each), ids 3.. in 1 row.
    rows = [[0] * 10 for _ in range(100)]
    rows[0][1] = 1
    rows[1][1:3] = [2, 2]
    rows[2][1:3] = [2, 2]
    for i in range(3, 8):
        rows[10 + i][1] = i
    table = pl.DataFrame({"ids": rows}, schema={"ids": pl.List(pl.UInt16)})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(token_index, "POSTED_SHARE", 0.02)  # <= 2 rows
        mp.setattr(token_index, "POSTED_BUDGET", 0.005)  # <= 5 of 1,000 positions
        assert token_index.posted_ids(table) == [
            1,
            3,
            4,
            5,
            6,
        ]  # 1-row tokens first; 2 (4 positions) left out
        mp.setattr(token_index, "POSTED_BUDGET", 0.01)
        assert token_index.posted_ids(table) == [1, 2, 3, 4, 5, 6, 7]
        mp.setattr(token_index, "POSTED_SHARE", 0.01)  # <= 1 row
        assert token_index.posted_ids(table) == [1, 3, 4, 5, 6, 7]


def test_postings006_postings_are_small(planted):
    """The planted token's postings are a few KB a file: what a rare token's filter reads."""
    _, store = planted
    sizes = [post.stat().st_size for _, _, post in posted_files(store)]
    rows = [pl.read_ipc(post).height for _, _, post in posted_files(store)]
    assert all(s < 64 * 1024 for s in sizes) and sum(rows) >= 0.005 * 3072


def _arrow(path: Path):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).read_all()


@pytest.mark.parametrize("store_of", ["trl", "planted"])
def test_postings008_ingests_files_equal_those_read_back(store_of, trl, planted, tmp_path):
    """The token files and postings ingest's workers write from the rows they hold
    (``token_index.write_rows``) hold what is written from each file of ``parts/`` read back
    (``token_index.write``, what a commit does for a file without one): the same columns, values and
    metadata (vocabulary, posted numbers), on the TRL run with every token posted and on the generated run
    with its planted token. (Not the same bytes: rows read back come in one record batch per row group.)"""
    store = trl["all"] if store_of == "trl" else planted[1]
    parts = sorted((store.dir / "parts").glob("*/*.parquet"))
    assert parts
    with pytest.MonkeyPatch.context() as mp:
        if store_of == "trl":  # as the store was ingested
            mp.setattr(token_index, "POSTED_SHARE", 1.0)
            mp.setattr(token_index, "POSTED_BUDGET", 1.0)
        for src in parts:
            ingested_file = token_index.in_store(store.dir, src)
            again = tmp_path / ingested_file.name
            token_index.write(src, again)
            assert _arrow(ingested_file).equals(_arrow(again), check_metadata=True)
            post = token_index.postings_of(ingested_file)
            assert post.exists() == token_index.postings_of(again).exists()
            if post.exists():
                assert _arrow(post).equals(_arrow(token_index.postings_of(again)), check_metadata=True)
    assert any(token_index.postings_of(token_index.in_store(store.dir, p)).exists() for p in parts)
