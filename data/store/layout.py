"""Where and how a run's store is written: its folder in the cache, ``STORE_FORMAT``, the files' names and
the Parquet settings of a part.

Layout of one run's store (``<cache>/<run>-<hash>/``): a Delta Lake table (see data.store.table) of the
parts (``parts/step_block=<n>/``, one row per response, all columns, small row groups), ``scalars/`` and
``issues/`` (the same rows without texts and token arrays; the unusable lines; ``k<first>-<last>.parquet``:
a pack of many small parts), ``manifest.json`` (see data.store.manifest) and the files a commit derives
beside them (data.derived.registry). docs/store.md lists every file kind.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from data.metrics.registry import stored_columns
from data.remote import as_path

# Bump when what ingest writes changes (columns, layout, which lines it takes and how): stores of another
# format are rebuilt from the rollout files, never read (a store is a cache: no code keeps an older layout
# readable). 20: a live file's line after a last line taken without its newline numbered right (a newline
# read alone left the offset before it, and every later line of the file one too far: a store of 19 read
# while a trainer wrote may hold such lines). 19: the token strip's colour scale of the state committed (tokscale-g*.json, data.derived.tokscale):
# a fresh token page reads no token array for it; the top file of a search's rows (texttop) keeps each row's
# ends_with_end, as topk does, so a search over every step reads no part for its grid's end column (~90
# files' row groups at 2.56M responses); a file's full digest (files[...]["digest"]) chained with SHA-256 cut
# to 128 bits, not BLAKE2b-128 (data.ingest.digest: the same strength, 2.4x faster where the CPU has SHA
# instructions).
# 18: each response's end in the scalars (ends_with_end: with the default end tokens, as the ends
# counts), so the grid's end column and the ended / truncated filters read no token list (a page of rows over
# every step read ~40 row groups of the parts for it: 0.40 of 0.47 s cold at 256k responses).
# 17: the token index's postings (tokens/<block>.<part>.post.arrow: the rarest tokens of a file,
# within 1 % of its positions, their positions and every filterable per-token metric's value there; the token
# file's metadata lists the posted numbers): a rare token's filter reads a few KB a file; parts' row groups
# of 512 rows, not 256 (ROW_GROUP_SIZE: parts 355 -> 346 MB at 256k responses, a part written with ~15 %
# less CPU; benchmarks/RESULTS.md "2026-11-29: issue 32, the store's size by kind").
# 16: miles' per-token Parquet joined to its trajectory lines (a companion file, files[...]["companion"]
# in the manifest), prime-rl's trace stream and its annotations; the inference–trainer gap per response (infer_gap_n, _tail_n, _abs_mean, _abs_max,
# _tail_share, _first_tail, _mean, _max: positions the loss mask keeps, tail |Δ| > ln 2) and per step in the
# steps summary (the tail pooled from the counts), NeMo-RL's sample_loss_mask kept as its generated tokens'
# token_loss_mask (the gap leaves a sample out of the loss out); the critic's sums per response and per step
# (critic_n, critic_file_n, return_sum, return_sq_sum, value_error_sum / _sq_sum / _abs_sum: a step's explained
# variance pooled exactly), the value error against the file's own returns where it has them (else γ = 1);
# repetition over the response's tokens where it has them, else characters (scripts without spaces) or words,
# the unit kept (repetition_unit, the steps summary's repetition_units); the token index (tokens/<block>.<part>.arrow:
# each response's token strings as numbers into its file's vocabulary, what the responses page's token
# filter scans); float columns in BYTE_STREAM_SPLIT in parts, the scalars at zstd level 3, the text index's
# part and row 32-bit (at 256k responses: 1.22x -> 1.19x the plain Parquet of its lines; with this
# format's new columns and the token index, 1.32x: benchmarks/RESULTS.md).
# 15: a step read from a path only in a trainer's layout (AReaL's rollout/{version}/{task}.jsonl
# is its version folder's step, no longer the task id's), else step 0 said; secrets' texts masked at ingest
# (a store of 14 may hold them), the trainer's group key as group_id, NeMo Gym's input items and side files,
# empty completions; Atropos, prime-rl and miles dialects (a file matched before to the contract is matched
# again), a line of several responses (sample ids <file>-<line>.<n>, the line their group_id), the steps
# summary's KL outlier columns (kl_mean_*, kl_sum_total / _max, kl_top_*), each file's full digest in its
# manifest entry (files[...]["digest"]: a same-size edit whose time moved is found anywhere in the file),
# smaller files (parts zstd, the prompt index LZ4, the last commit's prompt index and top file not kept); 14: nothing pickled (the footers' facts as JSON), no layout of an older format read (zstd or LZ4
# aggregates, Parquet prompt index, a text index beside the store, counts in manifest entries, …);
# 13: a Delta Lake table, parts by step block, files named by their writer; 12: dialects (each file's in the manifest), nested folders, Parquet and compressed
# files, validation files apart, the model's own text of multi-turn responses, template previews; 11: no
# note for a trailing pad position (TRL's PPO value window); 10: a file's fingerprint (files[...]["print"])
# covers more than its first 64 KB;
# 9: one rule for a line whichever path reads it (steps at the ends of 64 bits, an empty
# key, a column named twice); 8: the tie rate in the steps file; 7: one win rate in the steps file (a NaN or
# infinite reward is no comparison);
# 6: steps from file names, more trainers' names, NeMo-RL's batches of one; 5: integers past 64 bits,
# steps out of range, lone surrogates, per-token fields of the trainer's own, objects' fields, whole
# conversations; 4: chat messages, true / false rewards, nested objects counted, fields named two ways.
STORE_FORMAT = 20
# Rows per row group of a part: one response = one row-group read. 512 rather than 256: fewer dictionaries
# (prompts, token strings) and column chunks, so parts 2.7 % smaller and written with 16 % less CPU (8 parts,
# 7 interleaved rounds), while one response's read (the tokens page) took about as long (read_rows 6.6 ->
# 7.0 ms, token_view 20.6 -> 18.7 ms CPU, medians of 4 interleaved cold processes at 256k responses). 64 was
# 3x slower to write than 256.
ROW_GROUP_SIZE = 512

# Columns of the narrow in-memory table (the registry's stored columns); everything else (texts, token
# arrays) stays in parts/.
SCALAR_CORE = stored_columns()
# The types of the scalar columns, for a store with no usable response (a run of only bad lines): pages and
# exports read an empty table with every column rather than fail on a missing one. A test compares them
# with what ingest derives.
SCALAR_DTYPES: dict[str, pl.DataType] = {
    **dict.fromkeys(
        ("sample_id", "source", "prompt_key", "prompt_preview", "response_preview", "repetition_unit"),
        pl.String(),
    ),
    **dict.fromkeys(
        (
            *("line", "part", "row", "step", "response_length", "response_chars", "n_kl_tokens"),
            *("critic_n", "critic_file_n"),
            *("infer_gap_n", "infer_gap_tail_n", "infer_gap_first_tail"),
        ),
        pl.Int64(),
    ),
    "has_tokens": pl.Boolean(),
    "ends_with_end": pl.Boolean(),
}
SCALAR_DTYPES = {c: SCALAR_DTYPES.get(c, pl.Float64()) for c in SCALAR_CORE}
PREVIEW_CHARS = 160
# String columns of a part whose values repeat (the same prompt for many responses, token strings from one
# vocabulary): dictionary-encoded, which makes the token strings 3x smaller and faster to write. Other
# columns are not: trying a dictionary on float arrays or response texts and giving it up costs about as
# much as writing them.
DICTIONARY_COLUMNS = ("prompt", "ref_response", "response_tokens", "source", "prompt_key", "prompt_preview")


# A part's codec. Snappy, its floats (its float columns and the token arrays' values) in Parquet's
# BYTE_STREAM_SPLIT encoding (write_part_file: each byte of the values apart). Against zstd at level 1 with the
# same encoding: parts ~13 % larger for 35 % less CPU to write them (10 part files of the 256k run, row groups
# of ROW_GROUP_SIZE: 64.7 against 57.2 MB, 0.354 against 0.547 CPU-s; benchmarks/bench_part_codec.py), ~0.7
# CPU-s of an ingest of 256k responses on the workers, and one response's row reads in 7.5 against 12.3 ms
# (benchmarks/RESULTS.md, "2026-11-30, ingest within 1.1x"). Everything snappy without the encoding
# (3baee48's parts): 68.6 MB, 0.343 CPU-s. zstd had made the store smaller than before's by more than it had
# to; traded back for ingest's time, the store still under before's.
PART_COMPRESSION = "snappy"
PART_COMPRESSION_LEVEL = None
# The scalars' level (zstd): 7 % smaller than level 1 (43 -> 41 MB at 256k), read as fast (zstd decodes at
# the same speed whatever the level), written a few ms slower a part.
SCALAR_COMPRESSION_LEVEL = 3


def float_columns(schema: pa.Schema) -> list[str]:
    """The Parquet paths of ``schema``'s floating-point values: its float columns and the values of its
    float lists (``<name>.list.element``)."""
    out = []
    for f in schema:
        if pa.types.is_floating(f.type):
            out.append(f.name)
        elif (pa.types.is_list(f.type) or pa.types.is_large_list(f.type)) and pa.types.is_floating(
            f.type.value_type
        ):
            out.append(f"{f.name}.list.element")
    return out


def write_part_file(df: pl.DataFrame, path: Path, row_group_size: int) -> None:
    """Write one part: :data:`PART_COMPRESSION`, ``row_group_size`` rows a group, statistics only for the
    plain numeric and boolean columns (range filters on them can skip row groups; texts and arrays are never
    filtered).

    Texts go to Arrow as Polars holds them (string views): converting them to Arrow's older string layout
    first cost ~9 ms of a 33 MB chunk's ~95 ms write."""
    table = df.to_arrow(compat_level=pl.CompatLevel.newest())
    plain = [
        f.name
        for f in table.schema
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_boolean(f.type)
    ]
    pq.write_table(
        table,
        path,
        row_group_size=row_group_size,
        compression=PART_COMPRESSION,
        compression_level=PART_COMPRESSION_LEVEL,
        # A list column's values are named by their Parquet path.
        use_dictionary=[
            f"{f.name}.list.element" if pa.types.is_large_list(f.type) or pa.types.is_list(f.type) else f.name
            for f in table.schema
            if f.name in DICTIONARY_COLUMNS
        ],
        write_statistics=plain,
        use_byte_stream_split=float_columns(table.schema),
    )


def _hash(text: str, n: int = 8) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()[:n]


def file_prefix(rel: str) -> str:
    """The stable per-file prefix of sample ids: 8 hex digits of the file's path inside the run."""
    return _hash(rel)


def sample_id(rel: str, line: int) -> str:
    """Stable id of the response on 1-based ``line`` of file ``rel``: it survives a cache rebuild."""
    return f"{file_prefix(rel)}-{line}"


def store_dir_for(cache_dir: Path, run_dir: Path, pad_tokens: tuple[str, ...], split: str = "train") -> Path:
    """Cache folder of a run: its name plus a hash of its absolute path, the pad tokens and the format
    (and of its split, for a folder's validation files: a run of their own, see data.store.runs)."""
    run_dir = as_path(run_dir).resolve()
    key = f"{run_dir}\n{','.join(pad_tokens)}\n{STORE_FORMAT}" + ("" if split == "train" else f"\n{split}")
    name = run_dir.name if split == "train" else f"{run_dir.name}-{split}"
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:60]
    return Path(cache_dir) / f"{safe}-{_hash(key, 12)}"


def part_name(part_id: int, tag: str | None = None) -> str:
    """The name of part ``part_id``'s files; ``tag``: its writer's (two writers of one store never write
    the same file, see data.store.table)."""
    return f"p{part_id:06d}-{tag}.parquet" if tag else f"p{part_id:06d}.parquet"


def name_id(name: str) -> int:
    """The part id of a file named by :func:`part_name` (or the first of a pack's)."""
    return int(name[1:].split("-", 1)[0].split(".", 1)[0])


def name_tag(name: str) -> str | None:
    """The writer's tag of a file named by :func:`part_name` or :func:`pack_name` (None: untagged)."""
    stem = name.rsplit(".", 1)[0]
    rest = stem.split("-")
    return rest[-1] if len(rest) > (2 if stem.startswith("k") else 1) else None


# Steps per block of parts/ (a Hive-style partition, ``parts/step_block=<n>/``): a chunk's rows of several
# blocks are written as one file per block. Measured on a generated run of 51,200 responses (200 steps of
# 256, 4 rank files, 288 MB; load ~20): 16 / 64 / 256 steps a block made 60 / 24 / 12 files, ingest took
# 6.7 / 7.5 / 7.2 CPU-s and one step's texts 21 / 50 / 19 ms to read (the parts' row-group statistics
# prune within a file): no cost stood out of the noise, so 64 keeps the files few (the 500 steps of the
# benchmark run make 8 partitions) while a block stays a small slice of a long run.
STEP_BLOCK = 64
STEP_BLOCK_COLUMN = "step_block"


def step_block(step: pl.Expr) -> pl.Expr:
    return step.floordiv(STEP_BLOCK)


def entry_name(part_id: int, entry: dict) -> str:
    """The name of the files of ``scalars/`` and ``issues/`` of part ``part_id`` (manifest ``entry``)."""
    return part_name(part_id, entry.get("tag"))


def part_file_path(part_id: int, tag: str | None, block: int) -> str:
    """The path in the store of part ``part_id``'s file of step block ``block``."""
    return f"parts/{STEP_BLOCK_COLUMN}={block}/{part_name(part_id, tag)}"


# A live run adds a part per file at every ingest; their scalars and issues are read whole (not their token
# arrays), at ~0.35 ms a file. When PACK_AT parts of at most PACK_ROWS rows are not yet in a pack, the writer
# copies their scalars into one file in scalars/ and their issues into one in issues/ (a "pack"); the
# parts' own token-array files stay as they are.
PACK_AT = 128
PACK_ROWS = 2048


def pack_name(parts: list[int], tag: str | None = None) -> str:
    return f"k{min(parts):06d}-{max(parts):06d}" + (f"-{tag}" if tag else "") + ".parquet"


# Columns of the issue files (one per part, and the packs' with a ``part`` column added).
ISSUE_SCHEMA = {
    "source": pl.String,
    "line": pl.Int64,
    "severity": pl.String,
    "reason": pl.String,
    "detail": pl.String,
}


def rows_at(lf: pl.LazyFrame, keys: pl.DataFrame, cols: list[str]) -> pl.DataFrame | None:
    """``cols`` of the rows ``keys`` (``part, row``, in that order) among those of ``lf``, a file that keeps
    some rows of the parts with their ``part`` and ``row`` (the first rows of the all-steps sorts, of the
    search's top file); None unless it holds every one. A file gone raises ``FileNotFoundError``."""
    want = keys.select(pl.col("part").cast(pl.Int64), pl.col("row").cast(pl.Int64)).with_row_index("__k")
    got = (
        lf.select(*dict.fromkeys(["part", "row", *cols]))
        .join(want.lazy(), on=["part", "row"], how="inner")
        .collect()
    )
    if got.height != keys.height:
        return None
    return got.sort("__k").select(cols)
