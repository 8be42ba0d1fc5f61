"""One response group side by side (GRPO, RLOO): the completions of one prompt at one step, grouped as
:mod:`data.metrics.group` groups them (the file's ``group_id``, else the prompt), each with its text,
reward, advantage and how it ended; and the groups a prompt formed over training, for links to them."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data.metrics.group import MIN_GROUP
from data.metrics.response import strip_pad_text
from data.prompts.detail import history
from data.signals import END_LABELS, ENDS, row_ends

# The completions one group view shows at most (a group of 64 is large for GRPO; beyond, the first ones
# by reward and the page says how many more).
GROUP_LIMIT = 64
# The groups of a prompt the prompt page links to at most (the latest steps first).
GROUPS_LISTED = 24


@dataclass(frozen=True)
class Group:
    """One group of a prompt at a step. ``group_id``: the file's group id as text (None: grouped by the
    prompt); ``n``: its responses with a finite reward; ``mean``, ``std`` (sample std, as
    :func:`~data.metrics.group.group_stats`), ``spread`` (max − min) of their rewards; ``signal``: its
    learning signal (:func:`~data.metrics.group.learning_signal`; None for a group of one); ``recomputed``:
    its advantages are recomputed (the file has none); ``cards``: one dict per response shown (at most
    :data:`GROUP_LIMIT`, by reward, highest first): ``sample_id, source_line, reward, advantage, end``
    (``"ended"``, ``"truncated"`` or None: cannot be told), ``length`` (tokens, else characters) and
    ``text`` (the response, pad tokens removed); ``total``: its responses in all; ``prompt``: the prompt's text
    (pad tokens removed, as the first response of the group has it)."""

    step: int
    group_id: str | None
    n: int
    mean: float | None
    std: float | None
    spread: float | None
    signal: bool | None
    recomputed: bool
    cards: list[dict]
    total: int
    prompt: str


def _gid(value) -> str | None:
    return None if value is None else str(value)


def prompt_groups(store, key: str, limit: int = GROUPS_LISTED) -> list[dict]:
    """The groups prompt ``key`` formed, latest step first (at most ``limit``): ``step, group_id`` (text or
    None), ``n`` responses, ``signal`` (learning signal), of groups of ``MIN_GROUP``+ responses only."""
    rows = history(store, key)
    if rows.height == 0 or "group_n" not in rows.columns:
        return []
    gid = pl.col("group_id").cast(pl.String) if "group_id" in rows.columns else pl.lit(None, pl.String)
    out = (
        rows.filter(pl.col("group_n") >= MIN_GROUP)
        .group_by("step", "group")
        .agg(gid.first().alias("group_id"), pl.len().alias("n"), pl.col("learning_signal").first())
        .sort(["step", "group_id"], descending=[True, False], nulls_last=True)
        .head(limit)
    )
    return out.select("step", "group_id", "n", pl.col("learning_signal").alias("signal")).to_dicts()


def group_views(
    store,
    key: str,
    step: int,
    group_id: str | None,
    pad_tokens: tuple[str, ...],
    end_tokens: tuple[str, ...],
    limit: int = GROUP_LIMIT,
) -> list[Group]:
    """The groups of prompt ``key`` at ``step`` (one with ``group_id``: that group only), each a
    :class:`Group` with its completions' texts and ends read from the store (only their rows). Empty when
    the prompt has no response at that step (or no such group)."""
    rows = history(store, key)
    if rows.height == 0:
        return []
    rows = rows.filter(pl.col("step") == step)
    has_gid = "group_id" in rows.columns
    if has_gid:
        rows = rows.with_columns(pl.col("group_id").cast(pl.String).alias("__gid"))
        if group_id is not None:
            rows = rows.filter(pl.col("__gid") == group_id)
    groups = []
    for (_,), part in rows.group_by(["group"], maintain_order=True):
        part = part.sort(["reward", "source", "line"], descending=[True, False, False], nulls_last=True)
        groups.append(_group(store, part, step, has_gid, pad_tokens, end_tokens, limit))
    return groups


def _group(store, rows: pl.DataFrame, step: int, has_gid: bool, pads, ends, limit: int) -> Group:
    first = rows.row(0, named=True)
    shown = rows.head(limit)
    keys = shown.select("part", "row")
    read = store.read_keys(keys, ["prompt", "response"])
    texts = read.get_column("response").to_list()
    ended = row_ends(store, keys, pads, ends).get_column(ENDS).to_list()
    length = "response_length" if shown.get_column("response_length").null_count() < shown.height else None
    cards = [
        {
            "sample_id": r["sample_id"],
            "source_line": r.get("source_line") or f"{r.get('source')}:{r.get('line')}",
            "reward": r["reward"],
            "advantage": r.get("advantage"),
            "end": None if e is None else END_LABELS[e],
            "length": r.get(length or "response_chars"),
            "length_unit": "tokens" if length else "characters",
            "text": strip_pad_text(t, tuple(pads)) or "",
        }
        for r, t, e in zip(shown.iter_rows(named=True), texts, ended, strict=True)
    ]
    n = int(first["group_n"] or 0)
    return Group(
        step=step,
        group_id=_gid(first.get("__gid")) if has_gid else None,
        n=n,
        mean=first["group_mean"],
        std=first["group_std"],
        spread=first["group_spread"],
        signal=first["learning_signal"],
        recomputed=bool(first["advantage_recomputed"]),
        cards=cards,
        total=rows.height,
        prompt=(strip_pad_text(read.item(0, "prompt"), tuple(pads)) or "").strip(),
    )
