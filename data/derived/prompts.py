"""The prompt list of a store (one row per prompt: see :func:`data.metrics.group.prompt_aggregates`) and the
run's trend threshold, computed at each commit and kept beside the parts (``prompts-g<N>.parquet``, named
in the manifest with the threshold), so that the prompts page reads a table of one row per prompt instead
of scanning every response of the run at its first visit; and the compare page's prompts of the run
(``matches-g<N>.parquet``, see :func:`data.compare.prompts.run_prompt_matches`), so that comparing two
runs reads, beside those, only the steps both runs have.

The same function (:func:`prompt_list`) makes the table at ingest and, for a store committed before this
file existed, on the page: one definition, the same rows in the same order, the same numbers to the last
bit. A prompt's early and late quarters are quarters of the steps it appears in, which move as steps come,
so the table is not a sum of per-step pieces: each commit computes it again from the committed scalars
(the columns it needs only, in part and row order). Commits are spaced by their own cost (see
``_Writer.maybe_commit``), so this stays a small share of a long ingest.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import polars as pl

from data.derived.base import Commit, collect_named, read_named
from data.derived.matches import read_prompt_matches as read_prompt_matches
from data.derived.matches import run_prompt_matches
from data.metrics.degeneration import step_length_medians, with_length_ratio
from data.metrics.group import prompt_aggregates, prompt_group_counts, prompt_hash, trend_threshold
from data.store.manifest import write_atomic
from data.store.reader import RunStore

# The scalar columns the prompt list is computed from (a scan reads only these).
TABLE_COLUMNS = (
    "prompt_key",
    "prompt_preview",
    "step",
    "reward",
    "ref_reward",
    "repetition",
    "length_ratio",
    "response_length",
    "response_chars",
    "group_id",
)

EMPTY_TABLE = {
    "prompt_key": pl.String,
    "n_steps": pl.Int64,
    "n_responses": pl.Int64,
    "first_step": pl.Int64,
    "last_step": pl.Int64,
    "reward_early": pl.Float64,
    "reward_late": pl.Float64,
    "reward_mean": pl.Float64,
    "gain_mean": pl.Float64,
    "n_both": pl.Int64,
    "wins": pl.Int64,
    "ties": pl.Int64,
    "repetition_mean": pl.Float64,
    "length_ratio_mean": pl.Float64,
    "order": pl.UInt32,
    "prompt_preview": pl.String,
    "n_groups": pl.Int64,
    "zero_spread_groups": pl.Int64,
    "reward_delta": pl.Float64,
    "win_rate": pl.Float64,
    "tie_rate": pl.Float64,
    "never_beats": pl.Boolean,
    "trend": pl.String,
}


# Prompts are aggregated in passes of about this many responses each (by a hash of their key: a prompt's
# responses all go to one pass), so that memory stays bounded as the run grows: one pass over a run of
# 2.56M responses held ~650 MB more.
PASS_ROWS = 500_000


# The manifest's entries naming the prompt list and the threshold it was classified with, and the prompts
# of the compare page (see data.derived.matches).
FILE_KEY = "prompts_file"
THRESHOLD_KEY = "prompts_threshold"
MATCHES_KEY = "prompt_matches_file"


def read_prompt_list(store) -> tuple[pl.DataFrame, float] | None:
    """``(table, threshold)``: the prompt list a commit wrote beside the store (None for a store committed
    without one)."""
    table = read_named(store, "prompts")
    if table is None:
        return None
    return table, float(store.manifest.derived["prompts"].meta.get("threshold") or 0.0)


def step_medians(store) -> pl.DataFrame:
    """Each step's median length (``step, length_median, chars_median``, see
    :func:`data.metrics.degeneration.step_length_medians`) from the steps summary (its ``_p50``: the
    finite values' linear median, which for these integer counts is exactly the median), else a scan."""
    # Three of the summary's ~65 columns: reading it whole cost ~5 ms at 5,000 steps.
    steps = store.steps_scan()
    if {"response_length_p50", "response_chars_p50"} <= set(steps.collect_schema().names()):
        return (
            steps.select(
                "step",
                pl.col("response_length_p50").cast(pl.Float64).alias("length_median"),
                pl.col("response_chars_p50").cast(pl.Float64).alias("chars_median"),
            )
            .sort("step")
            .collect()
        )
    return step_length_medians(store.scan(["step", "response_length", "response_chars"])).collect()


def prompt_list(store) -> tuple[pl.DataFrame, float]:
    """``(table, threshold)`` of a :class:`~data.store.reader.RunStore`'s responses shown: one row per prompt
    (columns :data:`EMPTY_TABLE`, first-seen order), and ``TREND_EFFECT`` × the run's reward σ."""
    # The steps summary counts exactly the responses shown: none, no prompt.
    steps = store.steps()
    if "prompt_key" not in store.schema() or steps.height == 0:
        return pl.DataFrame(schema=EMPTY_TABLE), 0.0
    # The previews are read for the first response of each prompt only, not for every response.
    lf = store.scan([c for c in TABLE_COLUMNS if c != "prompt_preview"] + ["part", "row"])
    threshold = trend_threshold(lf)
    names = lf.collect_schema().names()
    if "length_ratio" not in names:  # each step's medians are of all its responses, not of a pass's
        lf = with_length_ratio(lf, step_medians(store).lazy())
    passes = max(1, math.ceil(int(steps.get_column("n").sum()) / PASS_ROWS))
    # A group (by group_id) could span prompts: counted over the whole run, once.
    groups = prompt_group_counts(lf).collect().lazy() if passes > 1 and "group_id" in names else None
    frames = [
        prompt_aggregates(
            lf.filter(prompt_hash() % passes == k) if passes > 1 else lf, threshold, groups
        ).collect()
        for k in range(passes)
    ]
    # In first-seen order (the aggregation's own row order is arbitrary), numbered from 0.
    table = pl.concat(frames).sort("order")
    table = table.with_columns(pl.int_range(pl.len(), dtype=pl.UInt32).alias("order"))
    keys = table.select(pl.col("__part").alias("part"), pl.col("__row").alias("row"))
    previews = store.read_keys(keys, ["prompt_preview"]).get_column("prompt_preview")
    table = table.with_columns(previews.alias("prompt_preview")).drop("__part", "__row")
    return table.select(list(EMPTY_TABLE)), threshold


def write_prompt_list(store: RunStore, generation: int, tag: str) -> dict:
    """Compute the prompt list of the state ``store`` a commit is about to make (its steps summary written,
    its ``visible_below`` set) and write it as ``prompts-g<generation>-<tag>.parquet`` (``tag``: the
    writer's, so that two writers racing for a commit never write one file), with the compare page's
    prompts as ``matches-g…``; returns the manifest's entries that name them (:data:`FILE_KEY`,
    :data:`MATCHES_KEY`, :data:`THRESHOLD_KEY`)."""
    store_dir = Path(store.dir)
    table, threshold = prompt_list(store)
    out = {THRESHOLD_KEY: threshold}
    for key, prefix, frame in (
        (FILE_KEY, "prompts", table),
        (MATCHES_KEY, "matches", run_prompt_matches(store)),
    ):
        name = f"{prefix}-g{generation:06d}-{tag}.parquet"
        buf = io.BytesIO()
        frame.write_parquet(buf)
        write_atomic(store_dir / name, buf.getvalue())
        out[key] = name
    return out


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """The prompt list and the compare page's prompts of the state committed (its steps summary written);
    none for a commit made mid-read (readers compute them if asked)."""
    if c.aggregates:
        lists = write_prompt_list(c.store(), c.gen, c.tag)
    else:
        lists = {FILE_KEY: None, MATCHES_KEY: None, THRESHOLD_KEY: None}
    files = [c.dir / lists[k] for k in (FILE_KEY, MATCHES_KEY) if lists[k]]
    c.written += files
    c.named |= set(files)
    c.set(lists)


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, "prompts-g*.parquet", FILE_KEY)
