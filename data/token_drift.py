"""The drifting-tokens board: for two steps of a run, each token's mean per-token log-ratio (or mean
inference–trainer gap) at each, and the tokens whose mean moved most between them.

A token is its string as the file gives it (``Ġ.``). Its mean at a step is over every position of that
step's responses holding it where the metric is a finite number (the metrics are the token page's,
computed by :mod:`data.metrics.token`'s own functions); a token counts only where it is seen at least
``min_n`` times at each step, so that a token seen once does not top the board by chance. The board ranks
by the absolute change ``|mean at B − mean at A|``, largest first (ties by the token string).

Only the two steps' token arrays are read (the files and row groups that hold them), whatever the run's
size; the result is cached per store version.
"""

from __future__ import annotations

import polars as pl

from data.cache import StoreKey, shared
from data.metrics.token import INFERENCE_LOGPROB_FIELDS, explode_tokens, token_metrics
from data.store import RunStore
from data.token_scan import part_files, token_metric_fields

# The metrics whose mean a board compares: the log-ratio log π − log π_ref, and the inference–trainer gap.
DRIFT_METRICS = ("log_ratio", "infer_gap")
DEFAULT_DRIFT_METRIC = "log_ratio"
DEFAULT_MIN_N = 5  # a token counts where it is seen at least this many times at each step
TOP = 30  # tokens a board lists
DRIFT_SCHEMA = {
    "token": pl.String,
    "n_a": pl.UInt32,
    "mean_a": pl.Float64,
    "n_b": pl.UInt32,
    "mean_b": pl.Float64,
    "change": pl.Float64,
}


def step_token_means(store: RunStore, step: int, metric: str) -> pl.DataFrame:
    """``token, n, mean`` of ``metric`` at ``step``: per token string, its positions where the metric is
    finite and their mean (no row for a token with none)."""
    files, parts = part_files(store, step)
    names = {c: t for f in files for c, t in pl.read_parquet_schema(f).items()}
    empty = pl.DataFrame(schema={"token": pl.String, "n": pl.UInt32, "mean": pl.Float64})
    if not files or "response_tokens" not in names:
        return empty
    lists = [c for c in ("response_tokens", *token_metric_fields(metric)) if c in names]
    extras = [c for c in INFERENCE_LOGPROB_FIELDS if c in names] if metric == "infer_gap" else []
    lf = pl.scan_parquet(files, missing_columns="insert", extra_columns="ignore")
    if parts is not None:
        lf = lf.filter(pl.col("part").is_in(parts))
    key = (pl.col("part").cast(pl.Int64) * (1 << 32) + pl.col("row").cast(pl.Int64)).alias("row")
    rows = lf.filter(pl.col("step") == step).select(key, *lists, *extras).collect()
    long = token_metrics(explode_tokens(rows, (), extras))
    value = pl.col(metric).cast(pl.Float64)
    return (
        long.filter(pl.col("token").is_not_null() & value.is_not_null() & value.is_finite())
        .group_by("token")
        .agg(pl.len().cast(pl.UInt32).alias("n"), value.mean().alias("mean"))
        .cast({"n": pl.UInt32, "mean": pl.Float64})
    )


def drifting_tokens(
    store: RunStore, step_a: int, step_b: int, metric: str = DEFAULT_DRIFT_METRIC, min_n: int = DEFAULT_MIN_N
) -> pl.DataFrame:
    """The board: :data:`DRIFT_SCHEMA` rows of the tokens seen at least ``min_n`` times at both steps,
    ``change = mean_b − mean_a``, the largest ``|change|`` first (ties by token), every such token."""
    return _drift(StoreKey(store), step_a, step_b, metric, max(1, int(min_n)))


@shared(16)
def _drift(key: StoreKey, step_a: int, step_b: int, metric: str, min_n: int) -> pl.DataFrame:
    a = step_token_means(key.store, step_a, metric)
    b = step_token_means(key.store, step_b, metric)
    both = a.join(b, on="token", how="inner", suffix="_b").rename({"n": "n_a", "mean": "mean_a"})
    both = both.filter((pl.col("n_a") >= min_n) & (pl.col("n_b") >= min_n))
    both = both.with_columns((pl.col("mean_b") - pl.col("mean_a")).alias("change"))
    ranked = both.sort([pl.col("change").abs(), pl.col("token")], descending=[True, False])
    return ranked.select(list(DRIFT_SCHEMA)).cast(DRIFT_SCHEMA)


# Characters with a meaning in the search's regular expressions (Rust's regex crate, is_meta_character):
# a token's string is escaped with them so that ``^<token>$`` matches that string alone.
_META = set("\\.+*?()|[]{}^$#&-~")


def exact_token_pattern(token: str) -> str:
    """``^<token>$`` with the regex meta characters of ``token`` escaped: the token filter of exactly it."""
    return "^" + "".join("\\" + c if c in _META else c for c in token) + "$"
