"""Prompts across training: per-prompt aggregates and trends, response groups, one prompt's history.

Prompts are grouped by the store's ``prompt_key`` (a hash of the prompt with pad tokens removed and
surrounding whitespace stripped, computed at ingest). Everything here is computed from the in-memory
scalars once per store version and cached; nothing is persisted beside the store.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

import polars as pl

from data.cache import StoreKey
from data.config import DEFAULT_SEARCH_SECONDS
from data.degeneration import length_ratio_from, step_length_medians, with_length_ratio
from data.views import paths
from data.views.codec import encode, first, get_choice, get_int
from data.views.paths import shown_run, unknown_run_notice

# ---- definitions -----------------------------------------------------------------------------------------

# Early vs late: the first and the last quarter of the distinct steps a prompt appears in, rounded up
# (a prompt seen in k steps: ceil(k / 4) steps at each end; k = 2 compares its first and last step).
QUARTER = 0.25
# Trend threshold, in units of the run's reward standard deviation σ (over all responses, ddof = 1):
# late − early > 0.2 σ is "improved", < −0.2 σ "regressed", otherwise "flat" (0.2 is Cohen's "small"
# effect). A prompt whose responses never beat their reference response takes precedence over the three;
# a prompt seen in one step only has no trend.
TREND_EFFECT = 0.2
TRENDS = {
    "improved": "improved",
    "regressed": "regressed",
    "flat": "flat",
    "never": "never beats the reference",
    "single": "one step only",
}
# A group is the responses of one step that share a ``group_id`` (when the run has one) or else a
# prompt; only groups of at least two responses with a finite reward count (a single response has no
# spread). A zero-spread group (every reward equal) gives no learning signal to GRPO / RLOO.
MIN_GROUP = 2
# Recomputed advantages: (reward − group mean) / group std with the sample std (ddof = 1), as TRL's
# GRPO does (it adds 1e-4 to the std; we do not); 0 when the group's std is 0.
ADVANTAGE_DDOF = 1

PROMPT_KEY_RE = re.compile(r"[0-9a-f]{16}")


def _finite(col: str) -> pl.Expr:
    return pl.col(col).is_not_null() & pl.col(col).is_finite()


def _ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    return pl.when(den > 0).then(num / den)


# ---- groups ----------------------------------------------------------------------------------------------


def prompt_hash() -> pl.Expr:
    """``prompt_key`` as a 64-bit hash: the in-memory grouping key (integer keys group several times faster
    than strings; a collision among a run's prompts has a probability of about n² / 2^65)."""
    return pl.col("prompt_key").hash(seed=1)


def group_key(names: list[str] | set[str]) -> pl.Expr:
    """Within-step group of a response, as a 64-bit hash: of ``group_id`` when the run has one (falling back
    to the prompt where it is missing), else of the prompt. Null when neither column exists."""
    by_prompt = prompt_hash() if "prompt_key" in names else pl.lit(None, pl.UInt64)
    if "group_id" in names:
        gid = pl.col("group_id")
        return pl.when(gid.is_not_null()).then(gid.cast(pl.String).hash(seed=2)).otherwise(by_prompt)
    return by_prompt


def group_stats(rows: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (step, group): ``group`` (see :func:`group_key`), ``group_n``, ``group_mean``,
    ``group_std``, ``group_min``, ``group_max`` over the finite rewards, ``group_spread`` (max − min) and
    ``zero_spread`` (both only for groups of ``MIN_GROUP``+), and ``__p``, the group's :func:`prompt_hash` (the smallest, as a
    group shares one prompt in practice).

    ``rows`` needs ``step``, ``reward`` and ``prompt_key`` (or ``group_id``).
    """
    names = rows.collect_schema().names()
    r = pl.col("__r")
    p = [pl.col("__p").min()] if "prompt_key" in names else []
    # Mask elementwise, then plain aggregations: a filter inside ``agg`` is far slower per group.
    return (
        rows.with_columns(
            group_key(names).alias("group"),
            pl.when(_finite("reward")).then(pl.col("reward")).alias("__r"),
            *([prompt_hash().alias("__p")] if p else []),
        )
        .group_by("step", "group")
        .agg(
            r.count().alias("group_n"),
            r.mean().alias("group_mean"),
            r.std(ddof=ADVANTAGE_DDOF).alias("group_std"),
            r.min().alias("group_min"),
            r.max().alias("group_max"),
            *p,
        )
        # A single response has no spread (null, not 0).
        .with_columns(
            pl.when(pl.col("group_n") >= MIN_GROUP)
            .then(pl.col("group_max") - pl.col("group_min"))
            .alias("group_spread")
        )
        .with_columns(
            pl.when(pl.col("group_n") >= MIN_GROUP).then(pl.col("group_spread") == 0).alias("zero_spread")
        )
    )


def group_step_summary(scalars: pl.LazyFrame) -> pl.LazyFrame:
    """Per step, sorted: ``n_groups`` (groups of ``MIN_GROUP``+ responses) and ``zero_spread_share`` (share of
    them whose rewards are all equal; null when the step has no group). Joined into the step summary."""
    names = scalars.collect_schema().names()
    if "prompt_key" not in names and "group_id" not in names:
        return (
            scalars.group_by("step")
            .agg(pl.lit(0, pl.UInt32).alias("n_groups"), pl.lit(None, pl.Float64).alias("zero_spread_share"))
            .sort("step")
        )
    cols = [c for c in ("step", "reward", "prompt_key", "group_id") if c in names]
    return (
        group_stats(scalars.select(cols))
        .group_by("step")
        .agg(
            (pl.col("group_n") >= MIN_GROUP).sum().cast(pl.UInt32).alias("n_groups"),
            pl.col("zero_spread").fill_null(False).sum().alias("__zero"),
        )
        .with_columns(
            _ratio(pl.col("__zero").cast(pl.Float64), pl.col("n_groups")).alias("zero_spread_share")
        )
        .drop("__zero")
        .sort("step")
    )


def with_advantage(rows: pl.LazyFrame, from_file: bool) -> pl.LazyFrame:
    """Add the group columns of :func:`group_stats` and ``advantage`` to responses (``rows``).

    With ``from_file`` the file's ``advantage`` column is kept as it is; otherwise it is recomputed as
    ``(reward − group_mean) / group_std`` (0 when the std is 0; null outside groups of ``MIN_GROUP``+ or
    for a non-finite reward). ``advantage_recomputed`` says which one a row holds.
    """
    names = rows.collect_schema().names()
    stats = group_stats(rows).drop("__p", strict=False)
    out = rows.with_columns(group_key(names).alias("group")).join(
        stats, on=["step", "group"], how="left", maintain_order="left"
    )
    if from_file and "advantage" in names:
        return out.with_columns(
            pl.col("advantage").cast(pl.Float64), pl.lit(False).alias("advantage_recomputed")
        )
    recomputed = (
        pl.when((pl.col("group_n") >= MIN_GROUP) & _finite("reward"))
        .then(
            pl.when(pl.col("group_std") > 0)
            .then((pl.col("reward") - pl.col("group_mean")) / pl.col("group_std"))
            .otherwise(0.0)
        )
        .cast(pl.Float64)
    )
    return out.with_columns(recomputed.alias("advantage"), pl.lit(True).alias("advantage_recomputed"))


# ---- per prompt ------------------------------------------------------------------------------------------


def _prompt_step_stats(scalars: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (prompt ``__p``, step): counts and sums of reward, gain, wins, repetition and length
    ratio. ``scalars`` is a whole run (``length_ratio`` needs every response of a step)."""
    names = scalars.collect_schema().names()
    lf = scalars
    if "length_ratio" not in names:
        medians = step_length_medians(scalars)
        lf = lf.join(medians, on="step", how="left").with_columns(
            length_ratio_from(pl.col("length_median"), pl.col("chars_median")).alias("length_ratio")
        )
    rep = pl.col("repetition") if "repetition" in names else pl.lit(None, pl.Float64)
    ok = _finite("reward")
    both = ok & _finite("ref_reward")
    lf = lf.select(
        prompt_hash().alias("__p"),
        "step",
        pl.when(ok).then(pl.col("reward")).alias("__r"),
        pl.when(both).then(pl.col("reward") - pl.col("ref_reward")).alias("__g"),
        pl.when(both).then((pl.col("reward") > pl.col("ref_reward")).cast(pl.Int64)).alias("__w"),
        pl.when(rep.is_not_null() & rep.is_finite()).then(rep).alias("__rep"),
        pl.when(_finite("length_ratio")).then(pl.col("length_ratio")).alias("__lr"),
    )
    # Masked columns and plain aggregations: a filter inside ``agg`` is far slower per group.
    return lf.group_by("__p", "step").agg(
        pl.len().alias("n"),
        pl.col("__r").count().alias("r_n"),
        pl.col("__r").sum().alias("r_sum"),
        pl.col("__r").min().alias("r_min"),
        pl.col("__r").max().alias("r_max"),
        pl.col("__g").count().alias("b_n"),
        pl.col("__g").sum().alias("g_sum"),
        pl.col("__w").sum().alias("wins"),
        pl.col("__rep").count().alias("rep_n"),
        pl.col("__rep").sum().alias("rep_sum"),
        pl.col("__lr").count().alias("lr_n"),
        pl.col("__lr").sum().alias("lr_sum"),
    )


def trend_expr(threshold: float) -> pl.Expr:
    """Trend code (see ``TRENDS``) from ``never_beats``, ``n_steps`` and ``reward_delta`` columns."""
    d = pl.col("reward_delta")
    return (
        pl.when(pl.col("never_beats"))
        .then(pl.lit("never"))
        .when(pl.col("n_steps") < 2)
        .then(pl.lit("single"))
        .when(d.is_null() | d.is_nan())
        .then(pl.lit(None, pl.String))
        .when(d > threshold)
        .then(pl.lit("improved"))
        .when(d < -threshold)
        .then(pl.lit("regressed"))
        .otherwise(pl.lit("flat"))
    )


def trend_threshold(scalars: pl.LazyFrame) -> float:
    """``TREND_EFFECT`` × the run's reward standard deviation (0 when it has fewer than two rewards)."""
    sd = scalars.select(pl.col("reward").filter(_finite("reward")).std()).collect().item()
    return TREND_EFFECT * sd if sd is not None and math.isfinite(sd) else 0.0


def prompt_aggregates(scalars: pl.LazyFrame, threshold: float) -> pl.LazyFrame:
    """One row per prompt (unsorted): the prompt list's columns.

    ``n_steps`` distinct steps, ``n_responses``, ``first_step``/``last_step``, ``reward_early`` /
    ``reward_late`` (mean reward over the first / last ``QUARTER`` of its steps), ``reward_delta`` (late −
    early, null for one step), ``reward_mean``, ``gain_mean`` (mean reward − ref_reward where both exist),
    ``n_both``, ``wins``, ``win_rate`` (share of responses with reward > ref_reward among ``n_both``),
    ``never_beats`` (``n_both > 0`` and no win), ``trend`` (a ``TRENDS`` code, threshold in reward units),
    ``repetition_mean``, ``length_ratio_mean``, ``n_groups`` / ``zero_spread_groups`` and ``order``.
    """
    per_step = _prompt_step_stats(scalars).with_columns(
        pl.col("step").rank("ordinal").over("__p").alias("__rank"),
        pl.len().over("__p").alias("__k"),
    )
    q = (pl.col("__k").cast(pl.Float64) * QUARTER).ceil()
    early = pl.col("__rank") <= q
    late = pl.col("__rank") > pl.col("__k") - q
    per_step = per_step.with_columns(
        pl.when(early).then(pl.col("r_sum")).alias("__re"),
        pl.when(early).then(pl.col("r_n")).alias("__ne"),
        pl.when(late).then(pl.col("r_sum")).alias("__rl"),
        pl.when(late).then(pl.col("r_n")).alias("__nl"),
    )
    agg = per_step.group_by("__p").agg(
        pl.len().cast(pl.Int64).alias("n_steps"),
        pl.col("n").sum().cast(pl.Int64).alias("n_responses"),
        pl.col("step").min().alias("first_step"),
        pl.col("step").max().alias("last_step"),
        _ratio(pl.col("__re").sum(), pl.col("__ne").sum()).alias("reward_early"),
        _ratio(pl.col("__rl").sum(), pl.col("__nl").sum()).alias("reward_late"),
        _ratio(pl.col("r_sum").sum(), pl.col("r_n").sum()).alias("reward_mean"),
        _ratio(pl.col("g_sum").sum(), pl.col("b_n").sum()).alias("gain_mean"),
        pl.col("b_n").sum().cast(pl.Int64).alias("n_both"),
        pl.col("wins").sum().cast(pl.Int64).alias("wins"),
        _ratio(pl.col("rep_sum").sum(), pl.col("rep_n").sum()).alias("repetition_mean"),
        _ratio(pl.col("lr_sum").sum(), pl.col("lr_n").sum()).alias("length_ratio_mean"),
    )
    # The key text and first position of each prompt (one cheap pass over the strings).
    names = (
        scalars.select("prompt_key", "prompt_preview")
        .with_row_index("__idx")
        .group_by("prompt_key")
        .agg(pl.col("__idx").min().alias("order"), pl.col("prompt_preview").first())
        .with_columns(prompt_hash().alias("__p"))
    )
    names_in = scalars.collect_schema().names()
    if "group_id" in names_in:
        cols = [c for c in ("step", "reward", "prompt_key", "group_id") if c in names_in]
        groups = (
            group_stats(scalars.select(cols))
            .filter(pl.col("group_n") >= MIN_GROUP)
            .group_by("__p")
            .agg(
                pl.len().cast(pl.Int64).alias("n_groups"),
                pl.col("zero_spread").sum().cast(pl.Int64).alias("zero_spread_groups"),
            )
        )
    else:
        # Without group_id a group is (step, prompt): exactly the rows of ``per_step``, no second pass.
        grouped = pl.col("r_n") >= MIN_GROUP
        groups = per_step.group_by("__p").agg(
            grouped.sum().cast(pl.Int64).alias("n_groups"),
            (grouped & (pl.col("r_max") == pl.col("r_min"))).sum().cast(pl.Int64).alias("zero_spread_groups"),
        )
    return (
        names.join(agg, on="__p", how="left")
        .join(groups, on="__p", how="left")
        .drop("__p")
        .with_columns(
            pl.col("n_groups").fill_null(0),
            pl.col("zero_spread_groups").fill_null(0),
            pl.when(pl.col("n_steps") >= 2)
            .then(pl.col("reward_late") - pl.col("reward_early"))
            .alias("reward_delta"),
            _ratio(pl.col("wins").cast(pl.Float64), pl.col("n_both")).alias("win_rate"),
            ((pl.col("n_both") > 0) & (pl.col("wins") == 0)).alias("never_beats"),
        )
        .with_columns(trend_expr(threshold).alias("trend"))
    )


# ---- cached on the store version -------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _table(v: StoreKey) -> tuple[pl.DataFrame, float]:
    scalars = v.store.scalars()
    if "prompt_key" not in scalars.columns or scalars.height == 0:
        return pl.DataFrame(schema=_EMPTY_TABLE), 0.0
    lf = scalars.lazy()
    threshold = trend_threshold(lf)
    return prompt_aggregates(lf, threshold).collect(), threshold


@lru_cache(maxsize=8)
def _medians(v: StoreKey) -> pl.DataFrame:
    return step_length_medians(v.store.scalars().lazy()).collect()


@lru_cache(maxsize=8)
def _from_file(v: StoreKey) -> bool:
    return v.store.has_column("advantage")


@lru_cache(maxsize=64)
def _search(v: StoreKey, pattern: str, seconds: float) -> frozenset[str]:
    from data.metrics import prompt_key_text
    from data.queries import search

    pads = tuple(v.store.manifest.data.get("pad_tokens", ()))
    lf = (
        v.store.scan_parts()
        .select("prompt_key", "prompt")
        .unique("prompt_key")
        .with_columns(prompt_key_text(pads).alias("prompt"))
        .filter(pl.col("prompt").str.contains(pattern))
        .select("prompt_key")
    )
    return frozenset(search(lf, pattern, seconds).get_column("prompt_key").to_list())


_EMPTY_TABLE = {
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
    "repetition_mean": pl.Float64,
    "length_ratio_mean": pl.Float64,
    "order": pl.UInt32,
    "prompt_preview": pl.String,
    "n_groups": pl.Int64,
    "zero_spread_groups": pl.Int64,
    "reward_delta": pl.Float64,
    "win_rate": pl.Float64,
    "never_beats": pl.Boolean,
    "trend": pl.String,
}


def prompt_table(store) -> pl.DataFrame:
    """:func:`prompt_aggregates` of the store's run, one row per prompt (cached on the store version)."""
    return _table(StoreKey(store))[0]


def prompt_row(store, key: str) -> dict:
    """One prompt's row of :func:`prompt_table` as a dict ({} for an unknown key)."""
    rows = prompt_table(store).filter(pl.col("prompt_key") == key).to_dicts()
    return rows[0] if rows else {}


def run_trend_threshold(store) -> float:
    """The reward difference the store's trends were classified with (``TREND_EFFECT`` × σ)."""
    return _table(StoreKey(store))[1]


def step_medians(store) -> pl.DataFrame:
    """:func:`data.degeneration.step_length_medians` of the store (cached on the store version)."""
    return _medians(StoreKey(store))


def store_length_ratio(store, rows: pl.LazyFrame) -> pl.LazyFrame:
    """Add ``length_ratio`` (length over its step's median, see :mod:`data.degeneration`) to any rows of the
    store's scalars, e.g. one page of the responses table."""
    return with_length_ratio(rows, step_medians(store).lazy())


def search_prompts(store, pattern: str, seconds: float = DEFAULT_SEARCH_SECONDS) -> frozenset[str]:
    """Keys of the prompts whose text (pads removed, stripped) matches the regular expression ``pattern``.

    Raises :class:`data.queries.QueryError` for an invalid pattern (:class:`data.queries.SearchStopped` for a
    search that takes more than ``seconds``). Reads the prompt column of the parts once per (store version,
    pattern).
    """
    from data.queries import check_regex

    check_regex(pattern)
    return _search(StoreKey(store), pattern, seconds)


def overview(table: pl.DataFrame) -> dict:
    """Counts for the list header: prompts, recurring ones (2+ steps), per trend, and the most steps."""
    counts = dict.fromkeys(TRENDS, 0)
    if table.height:
        for code, n in table.group_by("trend").len().iter_rows():
            if code in counts:
                counts[code] = n
    return {
        "prompts": table.height,
        "recurring": int(table.filter(pl.col("n_steps") >= 2).height) if table.height else 0,
        "max_steps": int(table.get_column("n_steps").max() or 0) if table.height else 0,
        "never": int(table.get_column("never_beats").sum()) if table.height else 0,
        "trends": counts,
    }


# ---- one prompt ------------------------------------------------------------------------------------------

HISTORY_COLUMNS = (
    "sample_id",
    "source",
    "line",
    "part",
    "row",
    "step",
    "reward",
    "ref_reward",
    "reward_gain",
    "response_length",
    "response_chars",
    "kl_mean",
    "kl_sum",
    "repetition",
    "response_preview",
    "prompt_key",
    "prompt_preview",
    "group_id",
    "advantage",
)


def history(store, key: str) -> pl.DataFrame:
    """Every response to prompt ``key``, in step order, with ``length_ratio``, its group's columns (see
    :func:`group_stats`) and ``advantage`` / ``advantage_recomputed`` (see :func:`with_advantage`).

    Within a step: by group (``group_id`` when the run has one), then reward (highest first), then
    ``sample_id``. Empty for an unknown key.
    """
    scalars = store.scalars()
    if "prompt_key" not in scalars.columns:
        return pl.DataFrame()
    cols = [c for c in HISTORY_COLUMNS if c in scalars.columns]
    # Filter the big frame eagerly first (~1 ms): the rest of the plan then works on a few rows.
    rows = scalars.filter(pl.col("prompt_key") == key).select(cols).lazy()
    if "repetition" not in cols:
        rows = rows.with_columns(pl.lit(None, pl.Float64).alias("repetition"))
    rows = store_length_ratio(store, rows)
    rows = with_advantage(rows, _from_file(StoreKey(store)))
    by = ["step", *(["group_id"] if "group_id" in cols else []), "group", "reward", "sample_id"]
    desc = [c == "reward" for c in by]
    return rows.sort(by, descending=desc, nulls_last=True).collect()


def history_by_step(rows: pl.DataFrame) -> pl.DataFrame:
    """Per step of a :func:`history`: ``n``, mean ``reward`` and mean ``ref_reward`` (finite values), sorted."""
    if rows.height == 0:
        return pl.DataFrame(
            schema={"step": pl.Int64, "n": pl.UInt32, "reward": pl.Float64, "ref_reward": pl.Float64}
        )
    return (
        rows.group_by("step")
        .agg(
            pl.len().alias("n"),
            pl.col("reward").filter(_finite("reward")).mean().alias("reward"),
            pl.col("ref_reward").filter(_finite("ref_reward")).mean().alias("ref_reward"),
        )
        .sort("step")
    )


def first_and_latest(rows: pl.DataFrame) -> tuple[dict | None, dict | None]:
    """The first response of the earliest step and of the latest step of a :func:`history` (by file and
    line within the step): ``(first, latest)`` rows as dicts; the same row twice for a single step."""
    if rows.height == 0:
        return None, None
    ordered = rows.sort("step", "source", "line")
    firsts = ordered.filter(pl.col("step") == ordered.item(0, "step"))
    lasts = ordered.filter(pl.col("step") == ordered.item(ordered.height - 1, "step"))
    return firsts.row(0, named=True), lasts.row(0, named=True)


def strip_pad_text(text: str | None, pad_tokens) -> str:
    """A text with every pad token removed (literal), as the store's previews and prompt keys do."""
    text = text or ""
    for tok in pad_tokens:
        text = text.replace(tok, "")
    return text


def texts(store, row: dict | None) -> dict:
    """``prompt``, ``response``, ``ref_response`` of one :func:`history` row, pad tokens removed (one read)."""
    if row is None:
        return {"prompt": "", "response": "", "ref_response": None}
    df = store.read_rows(int(row["part"]), [int(row["row"])], ["prompt", "response", "ref_response"])
    got = df.row(0, named=True) if df.height else {}
    pads = tuple(store.manifest.data.get("pad_tokens", ()))
    ref = got.get("ref_response")
    return {
        "prompt": strip_pad_text(got.get("prompt"), pads).strip(),
        "response": strip_pad_text(got.get("response"), pads),
        "ref_response": None if ref is None else strip_pad_text(ref, pads),
    }


# ---- the list: filter, sort, page ------------------------------------------------------------------------

VIEWS = ("all", "never")
# Sortable list columns and the order a first click on their header gives.
SORT_COLUMNS = {
    "prompt_preview": "asc",
    "first_step": "asc",
    "n_steps": "desc",
    "n_responses": "desc",
    "reward_early": "desc",
    "reward_late": "desc",
    "reward_delta": "desc",
    "gain_mean": "desc",
    "win_rate": "desc",
    "trend": "asc",
    "repetition_mean": "desc",
    "length_ratio_mean": "desc",
    "zero_spread_groups": "desc",
}
SORT_ALIASES = {"delta": "reward_delta", "gain": "gain_mean", "win": "win_rate", "steps": "n_steps"}
DEFAULT_SORT = "first_step"
ORDERS = ("asc", "desc")
PAGE_SIZE = 50


@dataclass(frozen=True)
class PromptsView:
    """The prompts page's URL: ``/prompts?run=R&view=never&trend=regressed&q=re&min_steps=3&sort=..&order=..
    &page=2`` for the list, ``&prompt=KEY`` for one prompt. ``to_query()`` omits defaults."""

    run: str | None = None
    prompt: str | None = None
    view: str = "all"
    trend: str | None = None
    q: str | None = None
    min_steps: int | None = None
    sort: str = DEFAULT_SORT
    order: str = "asc"
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping, runs: list[str] | None = None) -> tuple[PromptsView, list[str]]:
        """Decode a parsed query or ``layout(**query)``; each bad value falls back with a notice.

        With ``runs``, an unknown run falls back to the first run (notice); with no run, the first run.
        """
        msgs: list[str] = []
        run = first(query, "run") or None
        if runs is not None:
            asked, run = run, shown_run(paths.PROMPTS, run, runs)
            if notice := unknown_run_notice(paths.PROMPTS, asked, run, runs):
                msgs.append(notice)
        prompt = first(query, "prompt") or None
        if prompt is not None and not PROMPT_KEY_RE.fullmatch(prompt):
            msgs.append(f"Ignored prompt={prompt!r}: a prompt key is 16 hexadecimal digits.")
            prompt = None
        view = get_choice(query, "view", VIEWS, msgs, "all")
        trend = get_choice(query, "trend", TRENDS, msgs, None)
        q = first(query, "q") or None
        if q is not None:
            from data.queries import QueryError, check_regex

            try:
                check_regex(q)
            except QueryError as e:
                msgs.append(f"{e}: the text search is not applied.")
                q = None
        min_steps = get_int(query, "min_steps", msgs, None)
        if min_steps is not None and min_steps < 1:
            msgs.append(f"Ignored min_steps={min_steps}: expected 1 or more.")
            min_steps = None
        raw_sort = first(query, "sort")
        sort = SORT_ALIASES.get(raw_sort, raw_sort) if raw_sort else None
        if sort is not None and sort not in SORT_COLUMNS:
            msgs.append(f"Ignored sort={raw_sort!r}: expected one of {', '.join(SORT_COLUMNS)}.")
            sort = None
        order = get_choice(query, "order", ORDERS, msgs, None)
        page = get_int(query, "page", msgs, 1)
        if page is None or page < 1:
            msgs.append(f"Ignored page={page}: pages count from 1.")
            page = 1
        sort = sort or DEFAULT_SORT
        return cls(run, prompt, view, trend, q, min_steps, sort, order or "asc", page), msgs

    def to_query(self) -> str:
        """The query string of this view, defaults left out ('' when everything is a default)."""
        return encode(
            [
                ("run", self.run),
                ("prompt", self.prompt),
                ("view", None if self.view == "all" else self.view),
                ("trend", self.trend),
                ("q", self.q),
                ("min_steps", self.min_steps),
                ("sort", None if self.sort == DEFAULT_SORT else self.sort),
                ("order", None if self.order == "asc" else self.order),
                ("page", None if self.page == 1 else self.page),
            ]
        )

    def sorted_by(self, column: str) -> PromptsView:
        """The view after a click on ``column``'s header: same column flips the order, another column
        takes its natural order (``SORT_COLUMNS``); back to page 1."""
        if column == self.sort:
            order = "desc" if self.order == "asc" else "asc"
        else:
            order = SORT_COLUMNS.get(column, "asc")
        return replace(self, sort=column, order=order, page=1)


def filter_prompts(
    table: pl.DataFrame, view: PromptsView, keys: frozenset[str] | None = None
) -> pl.DataFrame:
    """The rows of a :func:`prompt_table` that ``view`` keeps (``keys``: text-search hits), sorted by
    ``view.sort`` (nulls last) with ties in first-seen order."""
    cond = pl.lit(True)
    if view.view == "never":
        cond &= pl.col("never_beats")
    if view.trend:
        cond &= pl.col("trend") == view.trend
    if view.min_steps:
        cond &= pl.col("n_steps") >= view.min_steps
    if keys is not None:
        cond &= pl.col("prompt_key").is_in(list(keys))
    by = [view.sort] + [c for c in ("first_step", "order") if c != view.sort]
    desc = [view.order == "desc"] + [False] * (len(by) - 1)
    return table.filter(cond).sort(by, descending=desc, nulls_last=True)


def page_of(rows: pl.DataFrame, page: int, size: int = PAGE_SIZE) -> tuple[pl.DataFrame, int, int]:
    """``(rows of page, the page actually shown, number of pages)``; a page past the end shows the last."""
    pages = max(1, -(-rows.height // size))
    page = min(max(1, page), pages)
    return rows.slice((page - 1) * size, size), page, pages
