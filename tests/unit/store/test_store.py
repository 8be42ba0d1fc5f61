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
