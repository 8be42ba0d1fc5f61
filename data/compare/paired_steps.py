"""Which steps of two runs a shared prompt is compared at (the *paired steps* of
:mod:`data.compare.prompts`), and which of a long run's rows a pairing needs to read."""

from __future__ import annotations

import math
from collections.abc import Callable

import polars as pl

from data.derived.matches import _BY_STEP_SCHEMA


def nearest_steps(a_steps: pl.DataFrame, b_steps: pl.DataFrame) -> pl.DataFrame:
    """Per prompt given by both (``a_steps``: ``match, a_step``; ``b_steps``: ``match, b_step``), its
    paired steps ``match, a_step, b_step, gap``: the smallest gap, then the largest sum (then the smaller
    A step: of two pairs that swap the same two steps, the first the definition tries). Only A's steps'
    nearest B step on either side can be such a pair (a pair with a B step further away has a larger gap),
    so the candidates are two as-of joins, not every pair of steps. A prompt both runs give at a common step
    pairs at the last such step (gap 0, the largest sum): found by one join, the as-of joins left to the
    others (often none: runs that draw the same prompts at the same steps)."""
    common = (
        a_steps.join(b_steps, left_on=["match", "a_step"], right_on=["match", "b_step"], how="inner")
        .group_by("match")
        .agg(pl.col("a_step").max())
        .select("match", "a_step", pl.col("a_step").cast(b_steps.schema["b_step"]).alias("b_step"))
        .with_columns((pl.col("a_step") - pl.col("b_step")).abs().alias("gap"))
    )
    rest = a_steps.join(common.select("match"), on="match", how="anti")
    if rest.height == 0:
        return common.sort("match")
    return pl.concat([common, _nearest_asof(rest, b_steps)]).sort("match")


def _nearest_asof(a_steps: pl.DataFrame, b_steps: pl.DataFrame) -> pl.DataFrame:
    """:func:`nearest_steps` by two as-of joins (see there)."""
    left, right = a_steps.sort("a_step"), b_steps.sort("b_step")
    candidates = pl.concat(
        [
            left.join_asof(
                right, left_on="a_step", right_on="b_step", by="match", strategy=side, check_sortedness=False
            )
            for side in ("backward", "forward")
        ]
    ).drop_nulls("b_step")
    return (
        candidates.with_columns((pl.col("a_step") - pl.col("b_step")).abs().alias("gap"))
        .sort(
            ["match", "gap", pl.col("a_step") + pl.col("b_step"), "a_step"],
            descending=[False, False, True, False],
        )
        .group_by("match", maintain_order=True)
        .first()
        .select("match", "a_step", "b_step", "gap")
    )


def near_rows(
    near: pl.DataFrame,
    steps: list[int],
    limit: float,
    read: Callable[[list[int], pl.DataFrame], pl.DataFrame],
    prompts: pl.DataFrame,
) -> pl.DataFrame:
    """A run's ``by_step`` rows (``match, step, n, reward``) at enough of its ``steps`` (sorted) that every
    prompt of the other run's ``near`` (its ``by_step``) finds the same paired steps (gap at most ``limit``)
    and the same rows at common steps as with all of them. ``read(at, todo)`` gives the rows at steps
    ``at`` (one range of ``steps``) of the prompts ``todo`` (rows of ``prompts``: ``match, keys``).

    The steps are read in ``near``'s own span of steps, then in windows of that span around it, doubled,
    until each prompt is settled: a prompt whose ``near`` steps run from ``lo`` to ``hi`` and whose best pair
    so far has gap ``g`` (none: infinite) is settled when no step left unread can give a gap of at most
    ``g`` (a step below the window, at ``L``, gives at least ``lo - L + 1``; above it, at ``R``,
    ``R + 1 - hi``), or none within ``limit``. Further windows read only the prompts not settled. Rows are
    sorted by match and step, as ``by_step_at``'s."""
    if not steps or near.height == 0:
        return pl.DataFrame(schema=_BY_STEP_SCHEMA)
    own = near.group_by("match").agg(pl.col("step").min().alias("lo"), pl.col("step").max().alias("hi"))
    todo = prompts.join(own.select("match"), on="match", how="semi")
    first, last = int(own.get_column("lo").min()), int(own.get_column("hi").max())
    # First the other run's own span of steps (where runs that draw the same prompts at the same steps pair,
    # gap 0, settling them), then windows of its span around it, doubled.
    span, radius = last - first + 1, 0
    frames: list[pl.DataFrame] = []
    done: tuple[int, int] | None = None
    while True:
        lo, hi = first - radius, last + radius
        ranges = [(lo, hi)] if done is None else [(lo, done[0] - 1), (done[1] + 1, hi)]
        for x, y in ranges:
            at = [s for s in steps if x <= s <= y]
            if at and todo.height:
                frames.append(read(at, todo))
        done = (lo, hi)
        rows = pl.concat(frames) if frames else pl.DataFrame(schema=_BY_STEP_SCHEMA)
        rows = rows.sort("match", "step")
        below, above = lo <= steps[0], hi >= steps[-1]
        if below and above:
            return rows
        pairs = nearest_steps(
            near.select("match", pl.col("step").alias("a_step")),
            rows.select("match", pl.col("step").alias("b_step")),
        )
        g = pl.col("gap").cast(pl.Float64).fill_null(math.inf)
        down, up = pl.col("lo") - lo + 1, hi + 1 - pl.col("hi")  # the least gap of a step below / above
        settled = (pl.lit(below) | (g < down) | (down > limit)) & (pl.lit(above) | (g < up) | (up > limit))
        left = own.join(pairs, on="match", how="left").filter(~settled).select("match")
        if left.height == 0:
            return rows
        todo = todo.join(left, on="match", how="semi")
        radius = radius * 2 if radius else span
