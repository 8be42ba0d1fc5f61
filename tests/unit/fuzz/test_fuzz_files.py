"""Fuzzing the readers of rollout files (data/ingest/blocks.py's splitter and block reader, files.py's plain,
compressed and Parquet readers): raw bytes and structured lines, whole, cut short or damaged, beside a good
file; every line read or reported, never an uncaught error, never more than the bounded memory (issue 33,
item 7)."""

from __future__ import annotations

import gzip
import io
import json

import polars as pl
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from data.ingest import ingest_run
from data.ingest.blocks import SNIPPET_BYTES, Oversized, _next_block, segments
from data.store import open_store
from tests.unit.fuzz.budget import BASE_BYTES, LIMITS, assert_bounded, budget, peak_bytes, read_limits
from tests.unit.fuzz.test_fuzz_records import VALUES, records

LINE_BYTES = int(LIMITS["RLBOARD_MAX_LINE_BYTES"])
CAP = int(LIMITS["RLBOARD_MAX_INFLATED_BYTES"])
CHUNK = 64 << 10  # the ingest's block size here (30 MB by default): small, so that blocks split files
PADS = ("<pad>",)


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    """One ingest of each kind of file before the examples: the first imports the readers and starts the
    writer's pools, which no example's memory bound is about."""
    run = tmp_path_factory.mktemp("warm") / "run"
    run.mkdir()
    (run / "a.jsonl.gz").write_bytes(gzip.compress(_good()))
    (run / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(_good()))
    pl.DataFrame({"prompt": ["p"], "response": ["r"], "reward": [1.0], "step": [1]}).write_parquet(
        run / "a.parquet"
    )
    with read_limits():
        _line_fates(run, tmp_path_factory.mktemp("warm-cache"))


def _good(n: int = 3) -> bytes:
    return b"".join(
        (json.dumps({"prompt": f"p{i}", "response": "r", "reward": float(i), "step": 1}) + "\n").encode()
        for i in range(n)
    )


@st.composite
def body(draw) -> bytes:
    """A JSON-lines file's bytes: lines of records, raw bytes, long lines, CRLF ends, a BOM, blank lines,
    maybe no final newline."""
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["record", "record", "record", "bytes", "long", "blank", "value"]))
        if kind == "record":
            line = json.dumps(draw(records()), allow_nan=True).encode("utf-8", "surrogatepass")
        elif kind == "bytes":
            line = draw(st.binary(max_size=60))
        elif kind == "long":  # about the line limit, on either side of it
            line = b'{"prompt": "' + b"x" * draw(st.integers(LINE_BYTES - 40, 3 * LINE_BYTES)) + b'"}'
        elif kind == "blank":
            line = draw(st.sampled_from([b"", b" ", b"\t"]))
        else:
            line = json.dumps(draw(VALUES)).encode()
        parts.append(line + draw(st.sampled_from([b"\n", b"\n", b"\r\n"])))
    data = b"".join(parts)
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]  # cut anywhere (a line still being written)
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + data


def _line_fates(run, cache) -> dict[str, dict[int, set[str]]]:
    """Per file, each line's fates: ``kept`` (a row), or an issue's severity: ``error``, ``note``,
    ``pending`` (a last line held back, or the rest of a file read no further)."""
    store = open_store(ingest_run(run, cache, PADS, chunk_bytes=CHUNK).store_dir)
    fates: dict[str, dict[int, set[str]]] = {}
    for src, line in store.scalars().select("source", "line").iter_rows():
        fates.setdefault(src, {}).setdefault(line, set()).add("kept")
    for r in store.issues().iter_rows(named=True):
        fates.setdefault(r["source"], {}).setdefault(r["line"], set()).add(r["severity"])
    return fates


def _lines_of(data: bytes) -> dict[int, bytes]:
    """The file's non-blank lines by number (from 1), as the ingest numbers them (a BOM at its start and
    a CR before a newline removed; a last line without a newline counts)."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    lines = data.split(b"\n")
    return {n: ln for n, ln in enumerate(lines, start=1) if ln.strip()}


def _check_all_accounted(fates: dict[int, set[str]], data: bytes, src: str) -> None:
    lines = _lines_of(data)
    for n, fate in fates.items():
        assert n in lines, (src, n, fate)  # no fate for a blank line or one that is not there
        assert not {"kept", "error"} <= fate, (src, n, fate)  # never both kept and unusable
    missing = {n: lines[n][:80] for n in lines if not fates.get(n, set()) & {"kept", "error", "pending"}}
    assert not missing, (src, missing)


@budget(40)
@given(
    data=body(),
    chunk=st.sampled_from([1, 3, 64, 1000, 1 << 16]),
    max_line=st.one_of(st.none(), st.integers(1, 80)),
)
def test_fuzz004_the_splitter_returns_each_line_once(data, chunk, max_line):
    """_next_block over any bytes, in pieces of any size: the blocks and the over-long lines, in order,
    are exactly the bytes up to the last newline; a block holds only complete lines within the limit."""
    f = io.BytesIO(data)
    start, out = 0, []
    while (got := _next_block(f, start, len(data), chunk, max_line)) is not None:
        after, block = got
        assert after > start
        if isinstance(block, Oversized):
            assert block.length == after - start and block.length > max_line
            assert block.head and data.startswith(block.head, start) and len(block.head) <= SNIPPET_BYTES
        else:
            assert block == data[start:after] and block.endswith(b"\n")
            if max_line is not None:
                assert all(len(ln) + 1 <= max_line for ln in block[:-1].split(b"\n"))
        out.append(block)
        start = after
    assert start == data.rfind(b"\n") + 1
    for block in out:
        if not isinstance(block, Oversized):
            assert b"".join(s if isinstance(s, bytes) else b"" for s in segments(block, max_line)) == block


def _compress(kind: str, data: bytes) -> bytes:
    if kind == "gz":
        return gzip.compress(data, compresslevel=1)
    return zstandard.ZstdCompressor(level=1).compress(data)


@st.composite
def damaged(draw, blob: bytes) -> tuple[bytes, bool]:
    """``(bytes, damaged)``: ``blob`` as it is, cut short, with a byte changed, or with garbage added."""
    how = draw(st.sampled_from(["whole", "whole", "cut", "flip", "tail"]))
    if how == "whole" or not blob:
        return blob, False
    if how == "cut":
        return blob[: draw(st.integers(0, len(blob) - 1))], True
    if how == "flip":
        i = draw(st.integers(0, len(blob) - 1))
        return blob[:i] + bytes([blob[i] ^ draw(st.integers(1, 255))]) + blob[i + 1 :], True
    return blob + draw(st.binary(min_size=1, max_size=40)), True


@budget(20)
@given(
    data=body(),
    kind=st.sampled_from(["jsonl", "gz", "zst"]),
    bomb=st.sampled_from([0, 0, 1, 64]),
    st_=st.data(),
)
def test_fuzz005_a_rollout_file_is_read_or_reported(tmp_path_factory, data, kind, bomb, st_):
    """A fuzzed .jsonl, .jsonl.gz or .jsonl.zst (maybe damaged, maybe inflating to megabytes of a line or of
    blank lines) beside a good file: the ingest ends, the good file keeps every row, each non-blank line of
    an undamaged file is kept or reported (a damaged file's cut is said), and Python's peak memory stays
    within what the file's size and the read limits allow."""
    tmp = tmp_path_factory.mktemp("fuzz005")
    run = tmp / "run"
    run.mkdir()
    if bomb and kind != "jsonl":  # megabytes of one repeated byte: a few KB compressed
        data += st_.draw(st.sampled_from([b"\n", b"a", b" "])) * (bomb << 20)
    stored, broken = (data, False) if kind == "jsonl" else st_.draw(damaged(_compress(kind, data)))
    name = {"jsonl": "fuzz.jsonl", "gz": "fuzz.jsonl.gz", "zst": "fuzz.jsonl.zst"}[kind]
    (run / name).write_bytes(stored)
    (run / "good.jsonl").write_bytes(_good())
    with read_limits():
        fates, peak = peak_bytes(_line_fates, run, tmp / "cache")
    assert fates["good.jsonl"] == {1: {"kept"}, 2: {"kept"}, 3: {"kept"}}
    read = min(len(data), CAP + 1) if kind != "jsonl" else len(data)
    assert_bounded(peak, BASE_BYTES + 16 * (len(stored) + read) + 8 * CHUNK, name)
    mine = fates.get(name, {})
    assert not any({"kept", "error"} <= fate for fate in mine.values()), mine
    if broken:  # read up to where the damage is seen, if it is (a changed byte may decode as another)
        return
    if len(data) > CAP:  # read up to the cap, and the rest said
        assert "pending" in set().union(*mine.values()), "the rest of a capped file not said"
        return
    _check_all_accounted(mine, data, name)


# TRL's completions table (step, prompt, completion, one column per reward function, advantage), other
# trainers' names, and columns of every type Parquet holds: lists, chat messages as lists of objects, nulls.
PARQUET_NAMES = ["step", "prompt", "completion", "response", "reward", "accuracy", "format", "advantage",
                 "messages", "ref_reward", "logprobs", "response_tokens", "extra"]  # fmt: skip
CHAT = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
PARQUET_TYPES = {
    pl.Int64: st.integers(-(2**63), 2**63 - 1),
    pl.Float64: st.floats(allow_nan=True),
    pl.String: st.text(max_size=12),
    pl.Boolean: st.booleans(),
    pl.List(pl.Float64): st.lists(st.floats(), max_size=4),
    pl.List(pl.String): st.lists(st.text(max_size=4), max_size=4),
    CHAT: st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=6)}
        ),
        max_size=3,
    ),
}


@st.composite
def tables(draw) -> pl.DataFrame:
    n = draw(st.integers(0, 6))
    names = draw(st.lists(st.sampled_from(PARQUET_NAMES), unique=True, max_size=8))
    cols = []
    for name in names:
        dtype = draw(st.sampled_from(list(PARQUET_TYPES)))
        values = draw(st.lists(st.one_of(st.none(), PARQUET_TYPES[dtype]), min_size=n, max_size=n))
        cols.append(pl.Series(name, values, dtype=dtype))
    return pl.DataFrame(cols)


@budget(20)
@given(
    table=tables(),
    big=st.booleans(),
    path=st.sampled_from(["completions/completions_00003.parquet", "r.parquet"]),
    st_=st.data(),
)
def test_fuzz006_a_parquet_file_is_read_or_reported(tmp_path_factory, table, big, path, st_):
    """A fuzzed Parquet file (TRL's completions table or any columns; maybe decoding past
    RLBOARD_MAX_PARQUET_BYTES, maybe damaged) beside a good file: the ingest ends, the good file keeps every
    row, each row of an undamaged file within the limit is kept or reported, and memory stays bounded."""
    tmp = tmp_path_factory.mktemp("fuzz006")
    run = tmp / "run"
    (run / path).parent.mkdir(parents=True)
    if big:  # decodes to 4 MB (over the 1 MB limit), compressed to a few KB
        table = table.with_columns(pl.lit("z" * 4096).alias("padding")).head(0)
        table = pl.concat([table, pl.DataFrame({"padding": ["z" * 4096] * 1024})], how="diagonal")
    buf = io.BytesIO()
    table.write_parquet(buf, compression="zstd")
    stored, broken = st_.draw(damaged(buf.getvalue()))
    (run / path).write_bytes(stored)
    (run / "good.jsonl").write_bytes(_good())
    with read_limits():
        fates, peak = peak_bytes(_line_fates, run, tmp / "cache")
    assert fates["good.jsonl"] == {1: {"kept"}, 2: {"kept"}, 3: {"kept"}}
    assert_bounded(peak, BASE_BYTES + 16 * (len(stored) + int(LIMITS["RLBOARD_MAX_PARQUET_BYTES"])), path)
    mine = fates.get(path, {})
    assert not any({"kept", "error"} <= fate for fate in mine.values()), mine
    if broken:
        return
    if big:
        assert mine == {1: {"pending"}}, mine  # refused whole, said
        return
    assert set(mine) == set(range(1, table.height + 1)) and all(
        f & {"kept", "error"} for f in mine.values()
    ), mine
