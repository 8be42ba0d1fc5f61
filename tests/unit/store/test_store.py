"""How parts are written: row groups, encodings, statistics, and a lossless round trip."""

from __future__ import annotations

import polars as pl
import pyarrow.parquet as pq

from data.store.layout import write_part_file


def test_store_part_encodings(tmp_path):
    """Parts dictionary-encode repeated strings (token strings included), not float arrays or responses."""
    df = pl.DataFrame(
        {
            "prompt": ["p"] * 600,
            "response": [f"r{i}" for i in range(600)],
            "response_tokens": [["a", "b"]] * 600,
            "logprobs": [[-1.0, -2.0]] * 600,
            "step": list(range(600)),
        },
        schema_overrides={"logprobs": pl.List(pl.Float32)},
    )
    write_part_file(df, tmp_path / "p.parquet", 256)
    md = pq.ParquetFile(tmp_path / "p.parquet").metadata
    assert md.num_row_groups == 3
    enc = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i).encodings for i in range(5)}
    assert "RLE_DICTIONARY" in enc["prompt"] and "RLE_DICTIONARY" in enc["response_tokens.list.element"]
    assert "RLE_DICTIONARY" not in enc["logprobs.list.element"] and "RLE_DICTIONARY" not in enc["response"]
    assert md.row_group(0).column(4).statistics.has_min_max  # step: range filters can skip row groups
    assert pl.read_parquet(tmp_path / "p.parquet").equals(df)


def test_store_part_floats_split(tmp_path):
    """A part's floats (float columns and float arrays' values, NaN, infinities and -0.0 among them) are
    written BYTE_STREAM_SPLIT and read back bit for bit; integers and texts are not."""
    import math
    import random

    rng = random.Random(3)
    specials = [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308]
    values = [rng.uniform(-30, 0) for _ in range(997)] + specials
    df = pl.DataFrame(
        {
            "reward": values,
            "logprobs": [values[i : i + 7] for i in range(len(values))],
            "half": pl.Series(values, dtype=pl.Float32),
            "line": list(range(len(values))),
            "response": [f"r{i}" for i in range(len(values))],
        }
    )
    write_part_file(df, tmp_path / "p.parquet", 256)
    md = pq.ParquetFile(tmp_path / "p.parquet").metadata
    enc = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i).encodings for i in range(5)}
    for c in ("reward", "logprobs.list.element", "half"):
        assert "BYTE_STREAM_SPLIT" in enc[c], (c, enc[c])
    assert all("BYTE_STREAM_SPLIT" not in enc[c] for c in ("line", "response"))
    back = pl.read_parquet(tmp_path / "p.parquet")
    bits = lambda frame: frame.select(  # noqa: E731 - the floats' bits, NaN and -0.0 included
        pl.col("reward").reinterpret(signed=False),
        pl.col("logprobs").list.eval(pl.element().reinterpret(signed=False)),
        pl.col("half").reinterpret(signed=False),
    )
    assert bits(back).equals(bits(df)) and back.drop("reward", "logprobs", "half").equals(
        df.drop("reward", "logprobs", "half")
    )


def test_store_replaced_whole_file_or_none(tmp_path):
    """A file written through ``replaced`` takes the old one's place only once whole: an error half-way
    leaves the old file and no temporary one beside it."""
    import pytest

    from data.store.manifest import replaced, write_atomic

    path = tmp_path / "f.bin"
    write_atomic(path, b"old")
    with pytest.raises(RuntimeError), replaced(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("stopped")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]
    with replaced(path, sync=False) as tmp:
        tmp.write_bytes(b"new")
    assert path.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]
