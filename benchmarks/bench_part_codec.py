"""What a part's codec costs to write: some files of a store's ``parts/`` written again by the options of
``data.store.layout.write_part_file`` and variants of its codec, CPU seconds and bytes.

    uv run python benchmarks/bench_part_codec.py STORE_DIR [--every 6] [--rounds 3]

``STORE_DIR``: one run's store. Every ``--every``-th file of its ``parts/`` is read into memory, then each
variant writes them all into memory, ``--rounds`` times interleaved; prints per variant the median CPU seconds
(this thread: pyarrow writes a file on the calling thread) and the bytes written.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.store.layout import DICTIONARY_COLUMNS, ROW_GROUP_SIZE, float_columns  # noqa: E402


def _kind(t: pa.DataType) -> str:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    return "number"


def _write(table: pa.Table, codec, split: bool = True) -> int:
    """``table`` written as ``write_part_file`` writes a part, with ``codec`` (a name, or one per column
    kind as a dict) and with or without byte-stream-split floats; returns its bytes."""
    if isinstance(codec, dict):
        codec = {f.name: codec[_kind(f.type)] for f in table.schema}
    level = 1 if codec == "zstd" else None
    listed = [
        f"{f.name}.list.element" if _kind(f.type) == "list" else f.name
        for f in table.schema
        if f.name in DICTIONARY_COLUMNS
    ]
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        row_group_size=ROW_GROUP_SIZE,
        compression=codec,
        compression_level=level,
        use_dictionary=listed,
        use_byte_stream_split=float_columns(table.schema) if split else False,
    )
    return buf.tell()


VARIANTS = {
    "zstd 1, floats split": ("zstd", True),
    "zstd 1": ("zstd", False),
    "snappy, floats split": ("snappy", True),
    "snappy": ("snappy", False),
    "lists lz4, the rest zstd 1, floats split": ({"list": "lz4", "text": "zstd", "number": "zstd"}, True),
    "numbers snappy, the rest zstd 1, floats split": (
        {"list": "zstd", "text": "zstd", "number": "snappy"},
        True,
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--every", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    files = sorted((args.store / "parts").glob("*/*.parquet"))[:: args.every]
    tables = [pq.read_table(f) for f in files]
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    size: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, (codec, split) in VARIANTS.items():
            t = time.thread_time()
            size[name] = sum(_write(table, codec, split) for table in tables)
            cpu[name].append(time.thread_time() - t)
    out = {
        "files": len(files),
        "rows": sum(t.num_rows for t in tables),
        "variants": {
            n: {"cpu_s": round(statistics.median(cpu[n]), 3), "mb": round(size[n] / 1e6, 1)} for n in VARIANTS
        },
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
