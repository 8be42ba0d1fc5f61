"""The token filter (``tok=<regex>&tok_metric=kl&tok_min=…&tok_max=…``): the responses holding a token whose
string, as the file gives it (``Ġ.``, not the displayed `` .``), matches a regular expression and whose
per-token metric is within ``tok_min <= x <= tok_max`` (bounds inclusive, either optional), each with where
its first such token is (its position, 0-based as on the token page), that token's value and how many of
its tokens match.

With the token index (:mod:`data.derived.tokens`) the pattern meets each file's vocabulary: a file none of
whose strings match is skipped; one whose matching strings are all posted (rare in it) answers from its
postings, memory-mapped, every such file in one query; the others' matching rows are read a file at a time.
Without it (an older store), the parts' token arrays are read a chunk of files at a time, each chunk in the search helper
(:mod:`data.bounded`: the pattern is the user's, its cost bounded as the text search's is) and within the
search's time limit in all: only the matches' ``part, row, tok_pos, tok_value, tok_hits`` come back to
the worker, whatever the run's size. A filter that runs out of time keeps the matches of the files it read
and says so (:attr:`TokenHits.cut`). The per-token metrics are those of :mod:`data.metrics.token`, the
token page's, computed by its own functions over the candidate responses only (those holding a matching
token string at all).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data import bounded
from data.cache import StoreKey, shared
from data.config import DEFAULT_SEARCH_SECONDS
from data.derived import tokens as token_index
from data.metrics.token import INFERENCE_LOGPROB_FIELDS, explode_tokens, token_metrics
from data.queries import QueryError, ResponseFilter, check_regex
from data.store import RunStore
from data.token_scan import part_files, token_metric_fields

# Files of parts/ read at once in the helper (at 2.56M responses, a file holds ~4,000 responses of 60
# tokens): the helper holds one chunk's candidate responses exploded, the worker only the matches.
CHUNK_FILES = 16
# Files of parts/ whose matching rows are read and measured together through the token index (one read and
# one pass of the metrics for them all; the time limit is looked at between such chunks). One: at 256k
# responses under load 11-15, 8 files at once were no faster within the machine's noise, and held the
# worker at 491 MB after the broadest filter against 272 MB a file at a time.
INDEX_CHUNK = 1
HIT_SCHEMA = {
    "part": pl.UInt32,
    "row": pl.UInt32,
    "tok_pos": pl.Int64,
    "tok_value": pl.Float64,
    "tok_hits": pl.UInt32,
}
# The columns the filter adds to each row it keeps (the responses table and /export show them).
HIT_COLUMNS = ("tok_pos", "tok_value", "tok_hits")


def hit_columns(metric_label: str) -> list[tuple[str, str, str]]:
    """``(column, header, description)`` of :data:`HIT_COLUMNS` for a filter on the metric ``metric_label``."""
    return [
        ("tok_pos", "token at", "position of the response's first token the token filter keeps (from 0)"),
        ("tok_value", f"token {metric_label}", f"{metric_label} of that token"),
        ("tok_hits", "tokens kept", "how many of the response's tokens the token filter keeps"),
    ]


@dataclass(frozen=True)
class TokenHits:
    """The matches of a token filter (``frame``: :data:`HIT_SCHEMA`, one row per response) found in
    ``files_read`` of the ``files`` of ``parts/`` it had to read, within ``seconds``."""

    frame: pl.DataFrame
    files_read: int
    files: int
    seconds: float

    @property
    def cut(self) -> bool:
        return self.files_read < self.files

    def notice(self, pattern: str) -> str | None:
        """What a cut filter shows: which share of the run it read (None when it read every file)."""
        if not self.cut:
            return None
        return (
            f"The token filter “{pattern}” was cut off after {self.seconds:g} s (the search's time limit): "
            f"the rows shown are the matches in {self.files_read:,} of the run's {self.files:,} part files, "
            "not all of them. Narrow it to one step, or make the pattern more specific."
        )


def hits_query(
    paths: list[str],
    pattern: str,
    metric: str,
    lo: float | None,
    hi: float | None,
    names: dict,
    step: int | None = None,
    parts: list[int] | None = None,
) -> pl.LazyFrame:
    """The lazy :data:`HIT_SCHEMA` frame of the part files ``paths`` (``names``: their schema; ``step``
    only that step; ``parts`` only those parts' rows, for files written with others), decoding every token
    string: what a store without the token index is searched with."""
    lists = [c for c in ("response_tokens", *token_metric_fields(metric)) if c in names]
    extras = [c for c in INFERENCE_LOGPROB_FIELDS if c in names] if metric == "infer_gap" else []
    lf = pl.scan_parquet(paths, missing_columns="insert", extra_columns="ignore")
    if parts is not None:
        lf = lf.filter(pl.col("part").is_in(parts))
    if step is not None:
        lf = lf.filter(pl.col("step") == step)
    # Only the responses holding a matching token string at all are exploded into one row per position.
    holds = pl.col("response_tokens").list.eval(pl.element().str.contains(pattern)).list.any()
    candidates = lf.filter(holds.fill_null(False)).select("part", "row", *lists, *extras)
    return hits_of(candidates, pl.col("token").str.contains(pattern), metric, lo, hi)


def in_range(value: pl.Expr, lo: float | None, hi: float | None) -> pl.Expr:
    """Whether a per-token ``value`` is in ``lo <= x <= hi`` (always, with neither bound)."""
    keep = pl.lit(True)
    if lo is not None or hi is not None:
        keep &= value.is_not_null() & value.is_finite()  # NaN and infinities are in no range
    if lo is not None:
        keep &= value >= lo
    if hi is not None:
        keep &= value <= hi
    return keep


def posted_hits(
    posts: list[tuple[Path, list[int]]],
    metric: str,
    lo: float | None,
    hi: float | None,
    step: int | None = None,
    parts: list[int] | None = None,
) -> pl.DataFrame:
    """The :data:`HIT_SCHEMA` rows of files whose matching tokens are all posted (``posts``: each one's
    postings file and the matching numbers; see :mod:`data.derived.tokens`): the postings memory-mapped,
    read at those numbers only, all the files' in one query. A posting holds the metric's value at its
    position as :func:`hits_of` computes it (absent: null at every posting of that file)."""
    frames = []
    for path, wanted in posts:
        lf = pl.scan_ipc(path)
        have = lf.collect_schema()
        value = pl.col(metric) if metric in have else pl.lit(None, dtype=pl.Float64)
        lf = lf.filter(pl.col("id").is_in(wanted))
        frames.append(lf.select("part", "row", "step", "pos", value.cast(pl.Float64).alias("v")))
    if not frames:
        return pl.DataFrame(schema=HIT_SCHEMA)
    lf = pl.concat(frames)
    if parts is not None:
        lf = lf.filter(pl.col("part").is_in(parts))
    if step is not None:
        lf = lf.filter(pl.col("step") == step)
    got = (
        lf.filter(in_range(pl.col("v"), lo, hi))
        .group_by("part", "row")
        .agg(
            pl.col("pos").min().alias("tok_pos"),
            pl.col("v").sort_by("pos").first().alias("tok_value"),
            pl.len().alias("tok_hits"),
        )
    )
    return got.collect().cast(HIT_SCHEMA).select(list(HIT_SCHEMA))


def hits_of(
    lf: pl.LazyFrame, match: pl.Expr, metric: str, lo: float | None, hi: float | None
) -> pl.LazyFrame:
    """The :data:`HIT_SCHEMA` frame of candidate responses ``lf`` (``part, row``, their token lists): the
    positions where ``match`` holds of the token (``token``: its string, or its number in the token index)
    and whose ``metric`` (computed by :func:`data.metrics.token.token_metrics`) is in ``lo <= x <= hi``,
    per response the first, its value and how many."""
    names = lf.collect_schema()
    extras = [c for c in INFERENCE_LOGPROB_FIELDS if c in names]
    lists = [c for c in names if c not in ("part", "row", *extras)]
    # One key per response over every part (explode_tokens and token_metrics group by ``row``).
    key = (pl.col("part").cast(pl.Int64) * (1 << 32) + pl.col("row").cast(pl.Int64)).alias("row")
    long = token_metrics(explode_tokens(lf.select(key, *lists, *extras), (), extras))
    value = pl.col(metric).cast(pl.Float64)
    return (
        long.filter(match.fill_null(False) & in_range(value, lo, hi))
        .group_by("row")
        .agg(
            pl.col("pos").min().alias("tok_pos"),
            value.sort_by("pos").first().alias("tok_value"),
            pl.len().alias("tok_hits"),
        )
        .select(
            (pl.col("row") // (1 << 32)).cast(pl.UInt32).alias("part"),
            (pl.col("row") % (1 << 32)).cast(pl.UInt32).alias("row"),
            pl.col("tok_pos").cast(pl.Int64),
            pl.col("tok_value"),
            pl.col("tok_hits").cast(pl.UInt32),
        )
    )


def matching(vocab: list[str], pattern: str) -> list[int]:
    """The numbers of the strings of a token file's vocabulary that ``pattern`` matches."""
    hits = pl.Series(vocab, dtype=pl.String).str.contains(pattern).to_list()
    return [i for i, hit in enumerate(hits) if hit]


def indexed_hits(
    store: RunStore,
    srcs: list[str],
    indexes: list[Path],
    pattern: str,
    metric: str,
    lo: float | None,
    hi: float | None,
    step: int | None = None,
    parts: list[int] | None = None,
) -> pl.DataFrame:
    """The :data:`HIT_SCHEMA` rows of the files ``srcs`` of ``parts/`` through their token files ``indexes``
    (see :mod:`data.derived.tokens`): the pattern is matched against each file's vocabulary, the numbers of
    its rows are scanned for the matching ones, and of the rows holding one only the metric's lists are read
    from the parts (from the row groups that hold them; never a token string), all the files' at once: the
    numbers say which positions match."""
    found, names = [], {}
    for src, index in zip(srcs, indexes, strict=True):
        wanted = matching(token_index.vocabulary(index), pattern)
        if not wanted:  # no token of this file matches: none of its rows is read
            continue
        lf = pl.scan_ipc(index)
        if parts is not None:
            lf = lf.filter(pl.col("part").is_in(parts))
        if step is not None:
            lf = lf.filter(pl.col("step") == step)
        # Per position, whether its token matches (the file's own numbers): what stands for the token.
        matched = pl.col("ids").list.eval(pl.element().is_in(wanted))
        got = lf.select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32), matched.alias("m"))
        found.append(got.filter(pl.col("m").list.any().fill_null(False)).collect())
        names.update(pl.read_parquet_schema(src))
    found = [f for f in found if f.height]
    if not found:
        return pl.DataFrame(schema=HIT_SCHEMA)
    keys = pl.concat(found)
    lists = [c for c in token_metric_fields(metric) if c in names]
    extras = [c for c in INFERENCE_LOGPROB_FIELDS if c in names] if metric == "infer_gap" else []
    rows = store.read_keys(keys.select("part", "row"), ["part", "row", *lists, *extras])  # in keys' order
    rows = rows.with_columns(keys.get_column("m").alias("response_tokens"))
    return hits_of(rows.lazy(), pl.col("token"), metric, lo, hi).collect().cast(HIT_SCHEMA)


def token_hits(store: RunStore, flt: ResponseFilter, seconds: float = DEFAULT_SEARCH_SECONDS) -> TokenHits:
    """The :class:`TokenHits` of ``flt``'s token filter over its step (every step for None), cached per
    store version; raises :class:`data.queries.QueryError` for a pattern that cannot run."""
    if not flt.tok:
        raise ValueError("no token filter")
    check_regex(flt.tok)
    return _hits(StoreKey(store), flt.tok, flt.tok_metric, flt.tok_min, flt.tok_max, flt.step, seconds)


@shared(16)
def _hits(
    key: StoreKey,
    pattern: str,
    metric: str,
    lo: float | None,
    hi: float | None,
    step: int | None,
    seconds: float,
) -> TokenHits:
    files, parts = part_files(key.store, step)
    deadline = time.monotonic() + seconds
    found, read = [], 0
    index = token_index.token_files(key.store.dir, files)
    if index is not None:  # the token index, in this process (the pattern meets only the vocabularies):
        # the files whose matching tokens are all posted from their postings at once, then the others a
        # file at a time (their rows read), within the time limit in all
        posts, rest = [], []
        for src, path in zip(files, index, strict=True):
            vocab, posted = token_index.vocabulary_posted(path)
            wanted = matching(vocab, pattern)
            if wanted and posted.issuperset(wanted):
                posts.append((token_index.postings_of(path), wanted))
            elif wanted:
                rest.append((src, path))
        found.append(posted_hits(posts, metric, lo, hi, step, parts))
        read = len(files) - len(rest)
        for i in range(0, len(rest), INDEX_CHUNK):
            if time.monotonic() >= deadline:
                break
            srcs, indexes = zip(*rest[i : i + INDEX_CHUNK], strict=True)
            found.append(
                indexed_hits(key.store, list(srcs), list(indexes), pattern, metric, lo, hi, step, parts)
            )
            read += len(srcs)
        frame = pl.concat(found) if found else pl.DataFrame(schema=HIT_SCHEMA)
        return TokenHits(frame.sort("part", "row"), read, len(files), seconds)
    for i in range(0, len(files), CHUNK_FILES):
        chunk = files[i : i + CHUNK_FILES]
        left = deadline - time.monotonic()
        if left <= 0:
            break
        # The chunk's list fields (the scalars' schema has none; a file may lack some): footers only.
        names = {c: t for f in chunk for c, t in pl.read_parquet_schema(f).items()}
        if "response_tokens" not in names:  # no token strings to match in these files
            read += len(chunk)
            continue
        lf = hits_query(chunk, pattern, metric, lo, hi, names, step, parts)
        try:
            found.append(bounded.collect(lf, left).cast(HIT_SCHEMA))
        except bounded.Stopped:
            break
        except bounded.Failed as e:
            raise QueryError(
                f"the token filter “{pattern}” failed: {str(e).strip().splitlines()[0]}"
            ) from None
        read += len(chunk)
    frame = pl.concat(found) if found else pl.DataFrame(schema=HIT_SCHEMA)
    return TokenHits(frame.sort("part", "row"), read, len(files), seconds)


def token_note(store: RunStore, flt: ResponseFilter, seconds: float = DEFAULT_SEARCH_SECONDS) -> str | None:
    """What the responses page says of ``flt``'s token filter: why it stopped short (cut off at the
    search's time limit, or a pattern that cannot run); None when it read every file, or there is none."""
    if not flt.tok:
        return None
    try:
        return token_hits(store, flt, seconds).notice(flt.tok)
    except QueryError as e:
        return str(e)


def with_hits(rows: pl.DataFrame, keys: pl.DataFrame, store: RunStore, flt: ResponseFilter, seconds: float):
    """``rows`` (read for ``keys``: ``part, row``, in their order) with where each one's token is, its value
    and how many (:data:`HIT_COLUMNS`) from ``flt``'s token filter (its hits are cached)."""
    at = keys.select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32))
    at = at.join(token_hits(store, flt, seconds).frame, on=["part", "row"], how="left", maintain_order="left")
    return rows.hstack(at.select(HIT_COLUMNS))
