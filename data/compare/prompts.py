"""Same prompt, two policies: prompts matched across runs by their text, paired reward differences,
prompts solved by one run and not the other, and a word-level diff of two responses.

**Matching.** A prompt's *match text* is its text with the run's pad tokens removed, in Unicode NFC
(so a composed "é" and "e" + combining accent match), every run of white space (spaces, tabs, new lines)
turned into one space, and white space at both ends removed. Case, punctuation and every other character
count. Two prompts of two runs are the same prompt when their match texts are equal (compared through a
128-bit BLAKE2b digest of the UTF-8 text). Prompts formatted by different chat templates are different
texts and do not match.

**Paired at comparable progress.** A prompt shared by runs A and B is compared at one step of each, the
*paired steps*: of the steps at which A gave it and those at which B gave it, the pair with the smallest
gap |step_A − step_B| (a tie goes to the largest sum step_A + step_B: the later training). A pair whose gap
exceeds the *gap limit* is left out of every count (the page says how many in a sentence of its own): two
runs' rewards for a prompt many steps apart compare two stages of training, not two policies. The limit
is given (the URL's ``gap=``, in steps) or else 10 % of the longer run's span of steps (last step − first
step + 1: for steps 1…60, 6); a gap equal to it is kept. A prompt's *reward at its paired step* is the
mean reward of its responses there (finite rewards); its *paired difference* is A's minus B's. *Over
training*: at each step where both runs gave the prompt, A's mean reward of the prompt at that step minus
B's; per step, the mean (and quartiles) of those differences over the prompts shared at that step. A
difference of at most 1e-12 of the larger mean (:data:`ROUNDING`) is 0: the same rewards averaged in another
order (another run's file order) differ by rounding, ~1e-16 of their size, which a chart would draw as a
difference.

**Solved.** A run *solves* a prompt when its reward at the prompt's paired step is at least the threshold
τ. τ is given (the URL's ``solved=``) or else the midpoint of the two runs' reward range, (lowest +
highest reward of either run) / 2, so that with a verifier's 0 / 1 rewards a prompt is solved when at
least half of its responses there are right.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from data import curves as run_curves
from data.cache import StoreKey, shared
from data.compare.notes import PROMPTS, Note
from data.compare.paired_steps import near_rows, nearest_steps
from data.compare.word_diff import WordDiff, word_diff
from data.derived.matches import (
    _BY_STEP_SCHEMA,
    RunPrompts,
    _by_step,
    _store_prompts,
    read_prompt_matches,
)
from data.derived.matches import match_key as match_key
from data.derived.matches import match_text as match_text
from data.derived.matches import match_text_expr as match_text_expr
from data.derived.matches import run_prompt_matches as run_prompt_matches
from data.derived.matches import run_prompts_from as run_prompts_from
from data.metrics.response import strip_pad_text
from data.queries import MAX_DISCRETE_VALUES, discrete_edges, distinct_values, histogram, histogram_edges
from data.run_context import steps_of
from data.store import RunStore

# Two mean rewards closer than this share of the larger are equal (their difference is 0): see the module.
ROUNDING = 1e-12


def difference(a: str, b: str) -> pl.Expr:
    """``a − b`` of two mean rewards, 0 where they differ by rounding only (see :data:`ROUNDING`)."""
    d = pl.col(a) - pl.col(b)
    return (
        pl.when(d.abs() <= ROUNDING * pl.max_horizontal(pl.col(a).abs(), pl.col(b).abs()))
        .then(0.0)
        .otherwise(d)
    )


# The paired scatter draws at most this many prompts (those with the largest differences): each point
# carries its prompt's preview and key to the browser, and beyond this it would weigh more than 300 kB.
MAX_SCATTER = 2000
# At most this many responses of one prompt at one step are shown side by side (a GRPO group is 4-64).
MAX_RESPONSES = 16
# The word diff compares at most this many words and spaces of each response (difflib is quadratic in
# the worst case); the rest is shown undiffed, with a note.
MAX_DIFF_TOKENS = 4000


def by_step_at(store: RunStore, prompts: pl.DataFrame, steps: list[int]) -> pl.DataFrame:
    """The ``by_step`` of :func:`run_prompts` at ``steps`` only (reading only the files of those steps),
    its prompts' match keys taken from ``prompts`` (:func:`run_prompt_matches`): the same rows as the
    whole run's ``by_step`` has at those steps."""
    if not steps or prompts.height == 0:
        return pl.DataFrame(schema=_BY_STEP_SCHEMA)
    keys = prompts.select("match", pl.col("keys").alias("prompt_key")).explode("prompt_key")
    rows = (
        store.scan(["prompt_key", "step", "reward"], steps=(min(steps), max(steps)))
        .filter(pl.col("step").is_in(steps))
        .join(keys.lazy(), on="prompt_key", how="inner")
    )
    return _by_step(rows).with_columns(pl.col("n").cast(pl.UInt32)).select(list(_BY_STEP_SCHEMA))


@shared(8)
def _run_prompts(v: StoreKey) -> RunPrompts:
    return _store_prompts(v.store)


def run_prompts(store: RunStore) -> RunPrompts:
    """:func:`run_prompts_from` of a store (cached on its version; reads the prompt column once)."""
    return _run_prompts(StoreKey(store))


# ---- two runs --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    """Prompts shared by runs ``a`` and ``b``, each at its paired steps. ``table``: one row per shared
    prompt paired within the gap limit, ``match, preview, a_keys, b_keys, a_step, b_step, gap, a_reward,
    b_reward`` (mean rewards at the paired steps), ``diff`` (a − b), ``a_solved``, ``b_solved``, ``a_n``,
    ``b_n`` (responses at the paired steps), sorted by ``diff`` then ``match``; ``over_steps``: ``step,
    n_prompts, diff_mean, diff_p25, diff_p75`` at every step where both runs gave a shared prompt;
    ``threshold``: τ; ``limit``: the gap limit in steps; ``shared``: prompts the runs share, of which
    ``left_out`` had no pair within the limit; counts of each run's prompts; notes."""

    a: str
    b: str
    table: pl.DataFrame
    over_steps: pl.DataFrame
    threshold: float | None
    a_prompts: int
    b_prompts: int
    notes: tuple[Note, ...]
    limit: float = math.inf
    shared: int = 0
    left_out: int = 0

    def headline(self) -> str:
        """One sentence: how many prompts are shared, of how many, how they are paired, and the solved
        threshold."""
        tau = "–" if self.threshold is None else f"{self.threshold:.4g}"
        return (
            f"{self.shared} shared prompts ({self.a_prompts} in {self.a}, {self.b_prompts} in {self.b}), each "
            f"compared at the steps of the two runs closest to each other (at most {self.limit:g} apart); "
            f"solved: mean reward at the paired step ≥ {tau}."
        )

    def scatter_rows(self, limit: int = MAX_SCATTER) -> tuple[pl.DataFrame, int]:
        """The shared prompts a scatter draws: all of them, or the ``limit`` with the largest absolute
        difference (then by match key) when there are more; and how many were left out."""
        if self.table.height <= limit:
            return self.table, 0
        ranked = self.table.sort(
            [pl.col("diff").abs(), pl.col("match")], descending=[True, False], nulls_last=True
        )
        return ranked.head(limit), self.table.height - limit

    def solved_by(self, first: str) -> pl.DataFrame:
        """Prompts solved by run ``first`` (``a`` or ``b``) and not by the other, the largest reward
        difference in its favour first."""
        other = "b" if first == "a" else "a"
        rows = self.table.filter(pl.col(f"{first}_solved") & ~pl.col(f"{other}_solved"))
        return rows.sort(["diff", "match"], descending=[first == "a", False])


def default_threshold(ranges: list[tuple[float, float]]) -> float | None:
    """τ when none is given: the midpoint of the lowest and highest reward of the runs' ``(min, max)``."""
    ranges = [r for r in ranges if r is not None]  # a run without a finite reward has no range
    if not ranges:
        return None
    return (min(r[0] for r in ranges) + max(r[1] for r in ranges)) / 2


def default_gap(spans: list[int]) -> float:
    """The gap limit when none is given: 10 % of the longer run's span of steps (see the module)."""
    return 0.1 * max(spans, default=0)


def step_span(steps: Sequence[int]) -> int:
    """A run's span of steps: last step − first step + 1 (0 without a step)."""
    return steps[-1] - steps[0] + 1 if steps else 0


def pair_from(
    a: str, pa: RunPrompts, b: str, pb: RunPrompts, threshold: float | None, limit: float = math.inf
) -> Paired:
    """:class:`Paired` of two runs' :class:`RunPrompts` (their ``by_step`` holds the steps a pair may take)
    with the solved threshold ``threshold`` and the gap limit ``limit``."""
    notes = []
    shared = pa.prompts.select("match", "preview", pl.col("keys").alias("a_keys")).join(
        pb.prompts.select("match", pl.col("keys").alias("b_keys")), on="match", how="inner"
    )
    by_a = pa.by_step.join(shared.select("match"), on="match", how="semi")
    by_b = pb.by_step.join(shared.select("match"), on="match", how="semi")
    steps = nearest_steps(
        by_a.select("match", pl.col("step").alias("a_step")),
        by_b.select("match", pl.col("step").alias("b_step")),
    ).filter(pl.col("gap") <= limit)
    tau = threshold
    solved = (
        (lambda c: pl.col(c) >= tau) if tau is not None and math.isfinite(tau) else (lambda c: pl.lit(False))
    )
    side = lambda frame, s: frame.select(  # noqa: E731 - the by_step of one side, named for the table
        "match", pl.col("step").alias(f"{s}_step"), pl.col("reward").alias(f"{s}_reward"), pl.col("n").alias(f"{s}_n")
    )  # fmt: skip
    table = (
        shared.join(steps, on="match", how="inner")
        .join(side(by_a, "a"), on=["match", "a_step"], how="left")
        .join(side(by_b, "b"), on=["match", "b_step"], how="left")
        .with_columns(
            difference("a_reward", "b_reward").alias("diff"),
            solved("a_reward").fill_null(False).alias("a_solved"),
            solved("b_reward").fill_null(False).alias("b_solved"),
        )
        .select(
            "match",
            "preview",
            "a_keys",
            "b_keys",
            "a_step",
            "b_step",
            "gap",
            "a_reward",
            "b_reward",
            "diff",
            "a_solved",
            "b_solved",
            "a_n",
            "b_n",
        )  # fmt: skip
        .sort(["diff", "match"], nulls_last=True)
    )
    left_out = shared.height - table.height
    over = (
        pa.by_step.join(pb.by_step, on=["match", "step"], how="inner", suffix="_b")
        .with_columns(difference("reward", "reward_b").alias("d"))
        .filter(pl.col("d").is_not_null())
        .group_by("step")
        .agg(
            pl.len().alias("n_prompts"),
            pl.col("d").mean().alias("diff_mean"),
            pl.col("d").quantile(0.25, "linear").alias("diff_p25"),
            pl.col("d").quantile(0.75, "linear").alias("diff_p75"),
        )
        .sort("step")
    )
    if pa.prompts.height == 0 or pb.prompts.height == 0:
        empty = [r for r, p in ((a, pa), (b, pb)) if p.prompts.height == 0]
        notes.append(Note(PROMPTS, tuple(empty), f"{', '.join(empty)}: no prompts to match."))
    elif shared.height == 0:
        notes.append(Note(PROMPTS, (a, b), f"{a} and {b} share no prompt ({pa.prompts.height} and "
                                           f"{pb.prompts.height} distinct prompts): there is nothing to pair."))  # fmt: skip
    if left_out:
        notes.append(Note(PROMPTS, (a, b), f"{left_out} of the {shared.height} shared prompts are left out of "
                                           f"the counts: {a} and {b} never gave them within {limit:g} steps of "
                                           "each other (the gap limit, gap= in the URL)."))  # fmt: skip
    elif over.height == 0 and table.height:
        notes.append(Note(PROMPTS, (a, b), f"The {table.height} shared prompts never come at the same step in "
                                           "both runs: no paired difference over training."))  # fmt: skip
    if (threshold is None or not math.isfinite(threshold)) and table.height:
        notes.append(Note(PROMPTS, (a, b), "No threshold (no finite reward): no prompt counts as solved."))
    return Paired(
        a,
        b,
        table,
        over,
        threshold,
        pa.prompts.height,
        pb.prompts.height,
        tuple(notes),
        limit,
        shared.height,
        left_out,
    )


@functools.lru_cache(maxsize=16)
def _pair(ka: StoreKey, a: str, kb: StoreKey, b: str, threshold: float | None, limit: float) -> Paired:
    # Each run's prompts as its last commit wrote them, and the means per prompt and step only at the steps
    # that can pair within the limit (a step of A further than it from every step of B cannot); of the run
    # with more such steps, only those near enough the other's to hold a prompt's pair (near_rows): a large
    # run compared with a short one reads about the short one's steps, not every response of its own.
    sa, sb = steps_of(ka.store), steps_of(kb.store)
    window = lambda steps, other: tuple(  # noqa: E731
        s for s in steps if other and other[0] - limit <= s <= other[-1] + limit
    )
    wa, wb = window(sa, sb), window(sb, sa)
    if len(wa) <= len(wb):
        by_a = _by_step_shared(ka, kb, wa)
        by_b = near_rows(by_a, list(wb), limit, lambda at, todo: by_step_at(kb.store, todo, at), _matches(kb))
    else:
        by_b = _by_step_shared(kb, ka, wb)
        by_a = near_rows(by_b, list(wa), limit, lambda at, todo: by_step_at(ka.store, todo, at), _matches(ka))
    return pair_from(a, RunPrompts(_matches(ka), by_a), b, RunPrompts(_matches(kb), by_b), threshold, limit)


@shared(16)
def _by_step_shared(key: StoreKey, other: StoreKey, steps: tuple[int, ...]) -> pl.DataFrame:
    """:func:`by_step_at` of run ``key`` at ``steps``, of the prompts it shares with run ``other`` only (the
    others' rows are never paired): a large run's means per prompt and step are grouped over a few keys."""
    shared_prompts = _matches(key).join(_matches(other).select("match"), on="match", how="semi")
    return by_step_at(key.store, shared_prompts, list(steps))


# In the process: a pairing asks for each run's prompts up to five times, and each read parses the file.
@shared(8, disk=False)
def _matches(key: StoreKey) -> pl.DataFrame:
    written = read_prompt_matches(key.store)
    return written if written is not None else _run_prompts(key).prompts


def reward_range(store: RunStore) -> tuple[float, float] | None:
    """The lowest and highest finite reward of a run (from its per-step summary); None without any."""
    steps = run_curves.run_steps(store)
    if steps.height == 0 or "reward_min" not in steps.columns:
        return None
    lo = steps.select(pl.col("reward_min").filter(pl.col("reward_min").is_finite()).min()).item()
    hi = steps.select(pl.col("reward_max").filter(pl.col("reward_max").is_finite()).max()).item()
    return None if lo is None or hi is None else (float(lo), float(hi))


def pair(
    a: str,
    store_a: RunStore,
    b: str,
    store_b: RunStore,
    threshold: float | None = None,
    gap: float | None = None,
) -> Paired:
    """:func:`pair_from` of two stores (cached on both versions, ``threshold`` and ``gap``); without a
    ``threshold``, τ is :func:`default_threshold` of the two runs' :func:`reward_range`; without a ``gap``,
    the limit is :func:`default_gap` of their spans of steps."""
    if threshold is None:
        threshold = default_threshold([reward_range(store_a), reward_range(store_b)])
    if gap is None:
        gap = default_gap([step_span(steps_of(s)) for s in (store_a, store_b)])
    return _pair(StoreKey(store_a), a, StoreKey(store_b), b, threshold, float(gap))


# ---- responses of one prompt, and their diff ---------------------------------------------------------------


def prompt_responses(store: RunStore, keys: list[str], step: int, limit: int = MAX_RESPONSES) -> pl.DataFrame:
    """The responses of the prompt (its ``prompt_key``s ``keys``) at ``step``: ``sample_id, step, reward,
    response`` (pads removed) and ``has_tokens``, the highest reward first (then by sample id), at most
    ``limit``."""
    names = store.schema()
    cols = [c for c in ("sample_id", "step", "reward", "part", "row", "has_tokens") if c in names]
    rows = (
        store.scan([*cols, "prompt_key"], step=step)
        .filter(pl.col("prompt_key").is_in(list(keys)) & (pl.col("step") == step))
        .select(cols)
        .sort(["reward", "sample_id"], descending=[True, False], nulls_last=True)
        .head(limit)
        .collect()
    )
    pads = tuple(store.manifest.pad_tokens)
    texts: dict[tuple[int, int], str] = {}
    for part, group in rows.group_by("part"):
        got = store.read_rows(int(part[0]), group.get_column("row").to_list(), ["response"])
        for r, t in zip(group.get_column("row").to_list(), got.get_column("response").to_list(), strict=True):
            texts[(int(part[0]), int(r))] = strip_pad_text(t, pads) or ""
    text = [
        texts[(int(p), int(r))] for p, r in zip(rows.get_column("part"), rows.get_column("row"), strict=True)
    ]
    out = rows.with_columns(pl.Series("response", text, dtype=pl.String))
    if "has_tokens" not in out.columns:
        out = out.with_columns(pl.lit(False).alias("has_tokens"))
    return out.select("sample_id", "step", "reward", "response", "has_tokens")


@dataclass(frozen=True)
class OpenedPrompt:
    """A shared prompt opened on the page: its preview, each run's step (its paired step) and
    responses there (:func:`prompt_responses` rows as dicts), and the :class:`WordDiff` of the best
    response of each (A's first)."""

    match: str
    preview: str
    a_step: int
    b_step: int
    a_rows: list[dict]
    b_rows: list[dict]
    diff: WordDiff


def open_prompt(paired: Paired, store_a: RunStore, store_b: RunStore, match: str) -> OpenedPrompt | None:
    """:class:`OpenedPrompt` of the shared prompt ``match`` (None when the two runs do not share it)."""
    row = paired.table.filter(pl.col("match") == match)
    if row.height == 0:
        return None
    r = row.row(0, named=True)
    a_rows = prompt_responses(store_a, r["a_keys"], r["a_step"]).to_dicts()
    b_rows = prompt_responses(store_b, r["b_keys"], r["b_step"]).to_dicts()
    best = [rows[0]["response"] if rows else "" for rows in (a_rows, b_rows)]
    return OpenedPrompt(match, r["preview"] or "", r["a_step"], r["b_step"], a_rows, b_rows, word_diff(*best))


def diff_bars(table: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """Histogram of a :class:`Paired` table's ``diff``: ``bin, lo, hi, count`` (bar k covers
    ``lo <= diff < hi``, the last one also its top edge), and whether the bars are discrete (one per
    value, when the differences take few values: see :func:`data.queries.discrete_edges`)."""
    diffs = table.lazy().select(pl.col("diff").cast(pl.Float64)).filter(pl.col("diff").is_finite())
    values = distinct_values(diffs, ("diff",), MAX_DISCRETE_VALUES)
    edges = discrete_edges(values) if values is not None else None
    discrete = edges is not None
    if edges is None:
        r = diffs.select(pl.col("diff").min().alias("lo"), pl.col("diff").max().alias("hi")).collect()
        edges = histogram_edges(r.item(0, "lo"), r.item(0, "hi")) if r.height else []
    if not edges:
        empty = {"bin": pl.Int32, "lo": pl.Float64, "hi": pl.Float64, "count": pl.Int64}
        return pl.DataFrame(schema=empty), False
    return histogram(diffs, "diff", edges).collect(), discrete
