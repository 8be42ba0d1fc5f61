"""The compare page's prompts of one run (``matches-g<N>-<tag>.parquet``): each prompt by its match key (a
digest of its text with pads removed and white space collapsed), its responses, steps and mean rewards,
written at each commit so that comparing two runs reads two small files (:func:`read_prompt_matches`), not
every response; computed from a store's scalars and prompt texts by :func:`run_prompt_matches`."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import polars as pl

from data.derived.base import Commit, collect_named, read_named
from data.metrics.group import finite, prompt_hash
from data.metrics.response import strip_pads
from data.store import RunStore

KIND = "matches"
PATTERN = "matches-g*.parquet"

# A run's prompts are aggregated in passes of about this many responses (see run_prompts_from).
PASS_ROWS = 500_000


def match_text_expr(col: str, pad_tokens: tuple[str, ...]) -> pl.Expr:
    """The match text (see the module docstring) of a text column."""
    text = strip_pads(pl.col(col), tuple(pad_tokens)).str.normalize("NFC")
    return text.str.replace_all(r"\s+", " ").str.strip_chars()


def match_text(text: str | None, pad_tokens: tuple[str, ...] = ()) -> str:
    """:func:`match_text_expr` of one Python text (None counts as "")."""
    df = pl.DataFrame({"t": [text or ""]}, schema={"t": pl.String})
    return df.select(match_text_expr("t", pad_tokens)).item()


def match_key(text: str) -> str:
    """The digest two runs' prompts are matched by: 32 hex digits of BLAKE2b-128 of the match text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


# ---- one run, cached on its store version ----------------------------------------------------------------


@dataclass(frozen=True)
class RunPrompts:
    """One run's prompts by match key. ``prompts``: ``match, preview, keys`` (the run's ``prompt_key``s
    with that match text, usually one), ``n_responses``, ``n_steps``, ``first_step``, ``last_step``,
    ``reward_last`` (mean at the last step), ``reward_all`` (mean over every response); ``by_step``:
    ``match, step, n, reward`` (mean at that step)."""

    prompts: pl.DataFrame
    by_step: pl.DataFrame


_PROMPTS_SCHEMA = {
    "match": pl.String,
    "preview": pl.String,
    "keys": pl.List(pl.String),
    "n_responses": pl.UInt32,
    "n_steps": pl.UInt32,
    "first_step": pl.Int64,
    "last_step": pl.Int64,
    "reward_last": pl.Float64,
    "reward_all": pl.Float64,
}
_BY_STEP_SCHEMA = {"match": pl.String, "step": pl.Int64, "n": pl.UInt32, "reward": pl.Float64}


def run_prompts_from(
    scalars: pl.DataFrame | pl.LazyFrame,
    texts: pl.DataFrame,
    pad_tokens: tuple[str, ...],
    with_by_step: bool = True,
    rows_hint: int = 0,
) -> RunPrompts:
    """:class:`RunPrompts` from a run's scalars (``prompt_key, step, reward``, and ``prompt_preview``
    unless ``texts`` has it: a frame, or a lazy scan with some rows) and its distinct prompt texts
    (``prompt_key, prompt``, optionally ``prompt_preview``: a match's preview is then that of its first
    key in ``texts``). ``with_by_step=False``: an empty ``by_step`` (the whole run's holds about a row
    per response; see :func:`by_step_at`). ``rows_hint``: about how many rows ``scalars`` has (the
    aggregation then runs in passes of :data:`PASS_ROWS`)."""
    empty = isinstance(scalars, pl.DataFrame) and scalars.height == 0
    if empty or "prompt_key" not in scalars.collect_schema().names() or texts.height == 0:
        return RunPrompts(pl.DataFrame(schema=_PROMPTS_SCHEMA), pl.DataFrame(schema=_BY_STEP_SCHEMA))
    norm = texts.select("prompt_key", match_text_expr("prompt", pad_tokens).alias("text"))
    uniq = norm.get_column("text").unique().to_list()
    keys = norm.with_columns(
        pl.col("text").replace_strict({t: match_key(t) for t in uniq}, return_dtype=pl.String).alias("match")
    ).select("prompt_key", "match")
    # Rows are grouped by integers (a hash of the key, a number per match): at a row per response, the
    # match's 32 hex digits and the previews would weigh ~100 bytes a row.
    keys = keys.with_columns(
        pl.col("match").rank("dense").cast(pl.UInt32).alias("__m"), prompt_hash().alias("__p")
    )
    own_preview = "prompt_preview" in texts.columns
    rows = (
        scalars.lazy()
        .select(
            prompt_hash().alias("__p"),
            "step",
            "reward",
            *([] if own_preview else ["prompt_preview"]),
        )
        .join(keys.lazy().select("__p", "__m"), on="__p", how="inner")
    )
    r = pl.col("reward").cast(pl.Float64)
    if own_preview:  # texts in first-response order: a match's preview is that of its first key
        named = keys.join(
            texts.select("prompt_key", "prompt_preview"), on="prompt_key", how="left", maintain_order="left"
        )
        named = named.group_by("__m", maintain_order=True).agg(
            pl.col("match").first(),
            pl.col("prompt_preview").first().alias("preview"),
            pl.col("prompt_key").unique().sort().alias("keys"),
        )
        per_match = [pl.len().cast(pl.UInt32).alias("n_responses")]
    else:
        named = keys.group_by("__m").agg(
            pl.col("match").first(), pl.col("prompt_key").unique().sort().alias("keys")
        )
        per_match = [
            pl.col("prompt_preview").first().alias("preview"),
            pl.len().cast(pl.UInt32).alias("n_responses"),
        ]
    per_match.append(r.filter(finite("reward")).mean().alias("reward_all"))
    # In passes of about PASS_ROWS responses (by match: a match's rows all go to one pass): one (match,
    # step) aggregation of a 2.56M-response run held ~350 MB.
    passes = max(1, math.ceil(rows_hint / PASS_ROWS)) if rows_hint else 1
    by_steps, lasts, counts = [], [], []
    for k in range(passes):
        sub = rows.filter(pl.col("__m") % passes == k) if passes > 1 else rows
        by_k = _by_step(sub, "__m")
        lasts.append(
            by_k.group_by("__m").agg(
                pl.col("step").max().alias("last_step"),
                pl.col("reward").sort_by("step").last().alias("reward_last"),
                pl.col("step").min().alias("first_step"),
                pl.len().cast(pl.UInt32).alias("n_steps"),
            )
        )
        counts.append(sub.group_by("__m").agg(per_match).collect())
        if with_by_step:
            by_steps.append(by_k)
    last = pl.concat(lasts)
    prompts = pl.concat(counts).join(named, on="__m", how="inner")
    prompts = prompts.join(last, on="__m", how="left").select(list(_PROMPTS_SCHEMA)).sort("match")
    if not with_by_step:
        return RunPrompts(prompts, pl.DataFrame(schema=_BY_STEP_SCHEMA))
    matches = keys.select("__m", "match").unique("__m")
    by_step = (
        pl.concat(by_steps)
        .join(matches, on="__m", how="left")
        .select("match", "step", pl.col("n").cast(pl.UInt32), "reward")
        .sort("match", "step")
    )
    return RunPrompts(prompts, by_step)


def _by_step(rows: pl.LazyFrame, by: str = "match") -> pl.DataFrame:
    """``<by>, step, n, reward`` (mean of the finite rewards) of ``rows`` (``<by>, step, reward``)."""
    r = pl.col("reward").cast(pl.Float64)
    return (
        rows.group_by(by, "step")
        .agg(pl.len().alias("n"), r.filter(finite("reward")).mean().alias("reward"))
        .sort(by, "step")
        .collect()
    )


def run_prompt_matches(store: RunStore) -> pl.DataFrame:
    """The ``prompts`` of :func:`run_prompts` of a store, computed from its scalars and prompt texts (ingest
    writes it beside the store at each commit: see :mod:`data.derived.prompts`)."""
    return _store_prompts(store, with_by_step=False).prompts


def _store_prompts(store: RunStore, with_by_step: bool = True) -> RunPrompts:
    pads = tuple(store.manifest.pad_tokens)
    if "prompt_key" not in store.schema() or store.steps().height == 0:
        return run_prompts_from(pl.DataFrame(), pl.DataFrame(), pads)
    # The first response of each prompt (in part and row order): only its prompt text and preview are
    # read (the same key is the same text, once pad tokens are removed and the ends stripped, which the
    # match text does too).
    idx = pl.col("part").cast(pl.Int64) * 2**32 + pl.col("row").cast(pl.Int64)
    firsts = (
        store.scan(["prompt_key", "part", "row"])
        .group_by("prompt_key")
        .agg(idx.min().alias("__idx"))
        .sort("__idx")
        .select(
            "prompt_key", (pl.col("__idx") // 2**32).alias("part"), (pl.col("__idx") % 2**32).alias("row")
        )
        .collect()
    )
    got = store.read_keys(firsts, ["prompt", "prompt_preview"])
    texts = firsts.select("prompt_key").with_columns(
        got.get_column("prompt"), got.get_column("prompt_preview")
    )
    n = int(store.steps().get_column("n").sum())
    return run_prompts_from(store.scan(["prompt_key", "step", "reward"]), texts, pads, with_by_step, n)


def read_prompt_matches(store) -> pl.DataFrame | None:
    """The compare page's prompts of a store as its last commit wrote them (None: not written)."""
    return read_named(store, KIND)


# ---- at a commit: written with the prompt list (data.derived.prompts.build) -------------------------------

MATCHES_KEY = "prompt_matches_file"


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, PATTERN, MATCHES_KEY)
