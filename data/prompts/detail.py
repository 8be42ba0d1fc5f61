"""One prompt across training: its history (every response to it, with its group's columns and
advantages), its reward chart, and what its page shows of them (the grid's columns and rows, the first and
latest response, how its responses form groups). Cached on the store version."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data.cache import StoreKey, shared
from data.derived import pidx as prompt_index
from data.metrics import label
from data.metrics.group import MIN_GROUP, finite, with_advantage
from data.metrics.response import source_line, strip_pad_text
from data.prompts.aggregates import prompt_row, store_length_ratio

# The store's scalars (see data.metrics.registry) and the files' own group id and advantage, which the
# group maths of data.metrics.group read where a run has them.
HISTORY_COLUMNS = prompt_index.COLUMNS


@shared(8)
def _from_file(v: StoreKey) -> bool:
    return v.store.has_column("advantage")


def history(store, key: str) -> pl.DataFrame:
    """Every response to prompt ``key``, in step order, with ``length_ratio``, its group's columns (see
    :func:`group_stats`) and ``advantage`` / ``advantage_recomputed`` (see :func:`with_advantage`).

    Within a step: by group (``group_id`` when the run has one), then reward (highest first), then
    ``sample_id``. Empty for an unknown key. Cached on the store version.
    """
    return _history(StoreKey(store), key)


@shared(32)
def _history(v: StoreKey, key: str) -> pl.DataFrame:
    store = v.store
    names = store.schema()
    if "prompt_key" not in names:
        return pl.DataFrame()
    cols = [c for c in HISTORY_COLUMNS if c in names]
    # The prompt's rows from the prompt-keyed index written at ingest (see data.derived.pidx);
    # a store committed without one: only the steps the prompt appears in (from the cached prompt list)
    # are scanned. The rows are collected first: the rest of the plan then works on a few rows.
    found = prompt_index.read(store, key, cols)
    if found is None:
        where = prompt_row(store, key)
        steps = (where.get("first_step"), where.get("last_step")) if where else None
        found = store.scan(cols, steps=steps).filter(pl.col("prompt_key") == key).collect()
    rows = found.lazy()
    if "repetition" not in cols:
        rows = rows.with_columns(pl.lit(None, pl.Float64).alias("repetition"))
    if "source" in cols and "line" in cols:
        rows = rows.with_columns(source_line())
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
            pl.col("reward").filter(finite("reward")).mean().alias("reward"),
            pl.col("ref_reward").filter(finite("ref_reward")).mean().alias("ref_reward"),
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


def texts(store, row: dict | None) -> dict:
    """``prompt``, ``response``, ``ref_response`` of one :func:`history` row, pad tokens removed (one read)."""
    if row is None:
        return {"prompt": "", "response": "", "ref_response": None}
    df = store.read_rows(int(row["part"]), [int(row["row"])], ["prompt", "response", "ref_response"])
    got = df.row(0, named=True) if df.height else {}
    pads = tuple(store.manifest.pad_tokens)
    ref = got.get("ref_response")
    return {
        "prompt": (strip_pad_text(got.get("prompt"), pads) or "").strip(),
        "response": strip_pad_text(got.get("response"), pads) or "",
        "ref_response": None if ref is None else strip_pad_text(ref, pads),
    }


def history_columns(rows: pl.DataFrame, recomputed: bool, has_groups: bool) -> list[tuple[str, str, str]]:
    """``(key, header, kind)`` of one prompt's responses grid: empty columns left out, group columns only
    when there are groups, the length in characters only for a run without tokens."""
    adv = "advantage (recomputed)" if recomputed else "advantage (from the file)"
    cols = [
        ("step", "step", "step"),
        ("sample_id", "response (file:line)", "text"),
        ("reward", label("reward"), "num"),
        ("ref_reward", label("ref_reward"), "num"),
        ("reward_gain", label("reward_gain"), "signed"),
    ]
    if has_groups:
        if "group_id" in rows.columns and rows.get_column("group_id").null_count() < rows.height:
            cols.append(("group_id", "group", "int"))
        cols += [
            ("group_n", "responses in the group", "int"),
            ("group_spread", "group reward spread (max − min)", "num"),
            ("advantage", adv, "signed"),
            ("learning_signal", label("learning_signal"), "text"),
        ]
    elif not recomputed:
        cols.append(("advantage", adv, "signed"))
    cols += [
        ("response_length", label("response_length"), "int"),
        ("response_chars", label("response_chars"), "int"),
        ("kl_mean", label("kl_mean"), "num"),
        ("repetition", label("repetition"), "num"),
        ("length_ratio", label("length_ratio"), "num"),
        ("response_preview", "response (start)", "text"),
    ]
    always = {"step", "sample_id", "response_preview", "reward", "learning_signal"}
    keep = []
    for c in cols:
        key = c[0]
        if key in rows.columns and key not in always and rows.get_column(key).null_count() == rows.height:
            continue
        if key == "response_chars" and "response_length" in rows.columns:
            if rows.get_column("response_length").null_count() < rows.height:
                continue  # tokens when the run has them, characters otherwise
        keep.append(c)
    return keep


@dataclass(frozen=True)
class RewardChart:
    """What one prompt's reward chart draws. ``points``: ``step, reward, sample_id`` of responses (each one
    opens its token page), ``means``: ``first, last, x, n, reward, ref_reward`` per step or bin of steps
    (``x`` its middle; means of the finite values). ``bin_steps`` 0: every response is a point and
    ``means`` are per step (exactly the chart of a prompt with few responses); otherwise the ``total``
    responses are too many to draw, and the steps are cut into bins of ``bin_steps`` consecutive steps
    (1: each step its own bin): ``points`` are each bin's lowest and highest reward response (``kind``
    ``lowest`` / ``highest``; one bin may give the same response twice)."""

    points: pl.DataFrame
    means: pl.DataFrame
    bin_steps: int
    total: int


# A prompt's chart draws each of its responses up to this many; beyond, each bin of steps (at most
# CHART_BINS bins) draws its lowest and highest response and its mean: what the page sends stays bounded
# however often the prompt comes back.
CHART_LIMIT = 500


CHART_BINS = 250


def reward_chart(rows: pl.DataFrame, limit: int = CHART_LIMIT, bins: int = CHART_BINS) -> RewardChart:
    """The :class:`RewardChart` of a :func:`history` (``step``, ``reward``, ``ref_reward``, ``sample_id``)."""
    total = rows.height
    if total <= limit:
        per_step = history_by_step(rows)
        means = per_step.select(
            pl.col("step").alias("first"),
            pl.col("step").alias("last"),
            pl.col("step").cast(pl.Float64).alias("x"),
            "n",
            "reward",
            "ref_reward",
        )
        return RewardChart(rows.select("step", "reward", "sample_id"), means, 0, total)
    lo, hi = int(rows.get_column("step").min()), int(rows.get_column("step").max())
    width = max(1, -(-(hi - lo + 1) // bins))  # ceil: at most `bins` bins cover lo..hi
    binned = rows.select("step", "reward", "ref_reward", "sample_id").with_columns(
        ((pl.col("step") - lo) // width * width + lo).alias("first")
    )
    means = (
        binned.group_by("first")
        .agg(
            pl.len().alias("n"),
            pl.col("reward").filter(finite("reward")).mean().alias("reward"),
            pl.col("ref_reward").filter(finite("ref_reward")).mean().alias("ref_reward"),
        )
        .with_columns(pl.min_horizontal(pl.col("first") + (width - 1), pl.lit(hi)).alias("last"))
        .with_columns(((pl.col("first") + pl.col("last")) / 2).alias("x"))
        .sort("first")
        .select("first", "last", "x", "n", "reward", "ref_reward")
    )
    scored = binned.filter(finite("reward"))
    ends = [
        scored.sort(["first", "reward", "sample_id"], descending=[False, high, False])
        .group_by("first", maintain_order=True)
        .first()
        .with_columns(pl.lit(kind).alias("kind"))
        for kind, high in (("lowest", False), ("highest", True))
    ]
    points = pl.concat(ends).select("step", "reward", "sample_id", "kind", "first")
    return RewardChart(points, means, width, total)


@dataclass(frozen=True)
class PromptDetail:
    """One prompt: its ``agg`` row of :func:`prompt_table`, how many of its ``total`` responses its grid
    shows (``shown``: the first ``HISTORY_LIMIT``, see :func:`history_block`) and the grid's ``columns``,
    its reward ``chart`` (see :func:`reward_chart`), its first and latest response (rows and texts; the
    latest may be the first), how advantages were had (``recomputed``) and whether its steps form groups."""

    agg: dict
    shown: int
    total: int
    chart: RewardChart
    columns: list[tuple[str, str, str]]
    first: dict
    latest: dict
    first_text: dict
    latest_text: dict
    recomputed: bool
    has_groups: bool


HISTORY_LIMIT = 2000


def group_note(detail: PromptDetail) -> str | None:
    """How the prompt's responses form groups and where their advantages come from (None without groups)."""
    if not detail.has_groups:
        return None
    how = (
        "are recomputed as (reward − group mean) / group standard deviation (sample std), 0 when all "
        "rewards are equal."
        if detail.recomputed
        else "come from the file's advantage column."
    )
    return "Responses of one step that share a group id (or else the prompt) form a group; advantages " + how


def _shown(rows: pl.DataFrame, limit: int) -> tuple[pl.DataFrame, bool, bool, list[tuple[str, str, str]]]:
    """The first ``limit`` rows of a :func:`history` (what the grid shows), whether their advantages are
    recomputed, whether they form groups, and the grid's columns."""
    shown = rows.head(limit)
    recomputed = bool(shown.get_column("advantage_recomputed").any()) if shown.height else True
    has_groups = bool(shown.height) and int(shown.get_column("group_n").max() or 0) >= MIN_GROUP
    return shown, recomputed, has_groups, history_columns(shown, recomputed, has_groups)


def prompt_detail(store, key: str, limit: int = HISTORY_LIMIT) -> PromptDetail | None:
    """The :class:`PromptDetail` of prompt ``key`` (None for a key the run does not have). Cached on the
    store version: it is small (no row of the history) whatever the prompt's count of responses."""
    return _detail(StoreKey(store), key, limit)


@shared(32)
def _detail(v: StoreKey, key: str, limit: int) -> PromptDetail | None:
    store = v.store
    rows = history(store, key)
    if rows.height == 0:
        return None
    first_row, latest_row = first_and_latest(rows)
    first_text = texts(store, first_row)
    latest_text = (
        texts(store, latest_row) if latest_row["sample_id"] != first_row["sample_id"] else first_text
    )
    shown, recomputed, has_groups, columns = _shown(rows, limit)
    return PromptDetail(
        prompt_row(store, key),
        shown.height,
        rows.height,
        reward_chart(rows),
        columns,
        first_row,
        latest_row,
        first_text,
        latest_text,
        recomputed,
        has_groups,
    )


def _sort_keys(column: str, names: list[str]) -> list[str] | None:
    """The columns a sort of the grid's ``column`` orders by (None: not a column of the rows)."""
    if column == "sample_id" and "source" in names and "line" in names:
        return ["source", "line", "sample_id"]  # the cell shows file:line: by file, then line as a number
    return [column] if column in names else None


def history_block(
    store,
    key: str,
    sort: str | None,
    descending: bool,
    start: int,
    end: int,
    limit: int = HISTORY_LIMIT,
) -> tuple[pl.DataFrame, int, list[tuple[str, str, str]]]:
    """Rows ``start:end`` of the responses one prompt's grid shows (the first ``limit`` of its
    :func:`history`), sorted by the grid's column ``sort`` (None or a column it does not have: the history's
    order; ties keep it), with their count and the grid's columns."""
    shown, _, _, columns = _shown(history(store, key), limit)
    keys = _sort_keys(sort, shown.columns) if sort else None
    if keys:
        shown = (
            shown.with_row_index("__order")
            .sort([*keys, "__order"], descending=[descending] * len(keys) + [False], nulls_last=True)
            .drop("__order")
        )
    start = max(0, start)
    return shown.slice(start, max(0, end - start)), shown.height, columns
