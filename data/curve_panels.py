"""The reward page's curves over steps: one :class:`Panel` per chart, its series with spread bands and an
optional zero shift, and the notes of what a run lacks (pure: a steps summary in, panels out)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from data.metrics import METRICS, label
from data.metrics.step import kl_top_share

# Spread bands of a curve: URL value -> UI text. All come from the store's per-step summary.
BANDS = {"std": "±1 std", "p25-p75": "p25–p75", "p5-p95": "p5–p95"}
DEFAULT_BAND = "std"


def step_label(key: str, fallback: str) -> str:
    """The metrics registry's label of a per-step column when it has one, else ``fallback``.

    ``fallback`` is itself built from registry labels (e.g. ``label("kl") + ", per-token mean"``).
    """
    return label(key) if key in METRICS else fallback


def _finite(col: str) -> pl.Expr:
    """``col`` as Float64 with NaN / infinities turned into nulls (a gap in a curve)."""
    c = pl.col(col).cast(pl.Float64)
    return pl.when(c.is_finite()).then(c).otherwise(None)


def has_values(steps: pl.DataFrame, col: str) -> bool:
    """True when the per-step column exists and holds at least one finite value."""
    return col in with_values(steps, [col])


def values_in(steps: pl.DataFrame, cols: list[str] | tuple[str, ...]) -> Callable[[str], bool]:
    """:func:`has_values` of many columns: ``cols`` asked of the frame in one pass, any other column on its
    own (a column not listed is asked, never taken for empty)."""
    asked, have = set(cols), with_values(steps, list(cols))
    return lambda col: col in have if col in asked else has_values(steps, col)


def with_values(steps: pl.DataFrame, cols: list[str]) -> set[str]:
    """Those of ``cols`` for which :func:`has_values` is true, asked of the frame in one pass."""
    present = list(dict.fromkeys(c for c in cols if c in steps.columns))
    if not present or steps.height == 0:
        return set()
    got = steps.select(_finite(c).is_not_null().any().alias(str(i)) for i, c in enumerate(present)).row(0)
    return {c for c, yes in zip(present, got, strict=True) if yes}


def band_exprs(col: str, band: str) -> tuple[pl.Expr, pl.Expr]:
    """Lower and upper edge of the spread band of ``col`` (a :data:`BANDS` key) from the step summary."""
    if band == "std":
        return _finite(f"{col}_mean") - _finite(f"{col}_std"), _finite(f"{col}_mean") + _finite(f"{col}_std")
    lo, hi = {"p25-p75": ("p25", "p75"), "p5-p95": ("p05", "p95")}[band]
    return _finite(f"{col}_{lo}"), _finite(f"{col}_{hi}")


def observed_range(steps: pl.DataFrame, col: str) -> tuple[float, float] | None:
    """The smallest and largest finite value of ``col`` over the run (the summary's ``<col>_min`` /
    ``<col>_max``), None without one."""
    if f"{col}_min" not in steps.columns or f"{col}_max" not in steps.columns:
        return None
    lo, hi = steps.select(_finite(f"{col}_min").min(), _finite(f"{col}_max").max()).row(0)
    return None if lo is None or hi is None else (float(lo), float(hi))


def band_clipped(steps: pl.DataFrame, col: str, band: str) -> tuple[float, float] | None:
    """The run's observed range of ``col`` where its ``band`` (±1 std: mean ± std, which knows no limit) runs
    past it at some step, so that :func:`curve` with ``clip`` cuts the band there; None otherwise (a
    quantile band lies inside the observed values by construction)."""
    rng = observed_range(steps, col) if band == "std" else None
    if rng is None:
        return None
    lo, hi = band_exprs(col, band)
    past = steps.select(((lo < rng[0]) | (hi > rng[1])).any()).item()
    return rng if past else None


def curve(
    steps: pl.DataFrame,
    col: str,
    band: str | None = None,
    zero_shift: bool = False,
    mean: bool = True,
    clip: tuple[float, float] | None = None,
) -> pl.DataFrame:
    """One curve over steps: ``step, y`` (+ ``lo, hi`` with a band), sorted by step.

    ``y`` is ``<col>_mean`` when ``mean`` (the summary's naming), else ``col`` itself. Non-finite values
    become nulls (gaps). ``clip``: the band's edges are cut to this range (see :func:`band_clipped`). With
    ``zero_shift`` the curve's first finite value is subtracted from ``y`` and from its band, so curves of
    different levels can be compared by trend.
    """
    ycol = f"{col}_mean" if mean else col
    exprs = [pl.col("step"), _finite(ycol).alias("y")]
    if band is not None:
        lo, hi = band_exprs(col, band)
        if clip is not None:
            lo, hi = lo.clip(*clip), hi.clip(*clip)
        exprs += [lo.alias("lo"), hi.alias("hi")]
    out = steps.select(exprs).sort("step")
    if zero_shift:
        first = out.get_column("y").drop_nulls()
        if first.len():
            shift = float(first[0])
            out = out.with_columns(pl.exclude("step") - shift)
    return out


@dataclass(frozen=True)
class Series:
    """One line of a curve panel: ``key`` is the metric (or per-step column) it draws, ``frame`` has
    ``step, y`` and, with a band, ``lo, hi``."""

    key: str
    label: str
    frame: pl.DataFrame
    band_label: str | None = None
    dashed: bool = False
    flags: bool = False  # points alone (no line): the steps a condition flags, null elsewhere


@dataclass(frozen=True)
class Panel:
    """One chart of the reward page's 2 x 2 grid: its series, y-axis title and a note on what is missing."""

    key: str
    title: str
    y_title: str
    series: tuple[Series, ...]
    note: str | None = None
    percent: bool = False
    empty: str | None = None  # what the chart says without a series (default: see the note)
    absent: bool = False  # the run can have none of its series (no such field): its note alone is shown


NOTE_NO_REF = "No reference reward (ref_reward) in this run: the reference curve is left out."
NOTE_NO_WIN = "No reference reward (ref_reward) in this run, so there is no win rate against it."
NOTE_NO_KL = (
    "No per-token log-probs (logprobs and ref_logprobs) in this run: KL to the reference cannot be computed."
)
NOTE_CHARS = "No token fields in this run: response length is shown in characters (pads excluded) instead."
NOTE_NO_LENGTH = "No response length in this run."


# The columns :func:`panels` draws when they have values (and :func:`kl_series`, its KL series), asked of the
# summary in one pass (a column left out of them is still asked, alone: see values_in).
PANEL_COLUMNS = (
    "ref_reward_mean", "log_ratio_token_mean", "response_length_mean", "response_chars_mean", "win_rate",
    "tie_rate", "zero_spread_share",
)  # fmt: skip
KL_COLUMNS = ("kl_token_mean", "kl_mean_max")


def panels(steps: pl.DataFrame, band: str = DEFAULT_BAND, zero_shift: bool = False) -> list[Panel]:
    """The four curve panels (reward, KL, length, win rate) of a per-step summary.

    Curves that cannot exist (no token fields, no ``ref_*``) are left out and the panel carries a note.
    """
    band_text = BANDS[band]
    zs = zero_shift
    # Which columns have values, asked of the summary once (a pass over its rows each time otherwise).
    has = values_in(steps, [*PANEL_COLUMNS, *KL_COLUMNS])
    shift = " (minus first value)" if zs else ""

    clip = band_clipped(steps, "reward", band)
    reward_band = band_text if clip is None else f"{band_text}, clipped to the observed range {_span(clip)}"
    reward = [Series("reward", label("reward"), curve(steps, "reward", band, zs, clip=clip), reward_band)]
    has_ref = has("ref_reward_mean")
    if has_ref:
        reward.append(
            Series(
                "ref_reward",
                label("ref_reward"),
                curve(steps, "ref_reward", None, zs),
                dashed=True,
            )
        )
    out = [
        Panel(
            "reward",
            "Reward",
            label("reward") + shift,
            tuple(reward),
            None if has_ref else NOTE_NO_REF,
        )
    ]

    kl = kl_series(steps, band, zs, has)
    for key, base in (("log_ratio_token_mean", "log_ratio"),):
        if has(key):
            name = step_label(key, f"{label(base)}, per-token mean")
            kl.append(Series(key, name, curve(steps, key, None, zs, mean=False)))
    out.append(Panel("kl", "KL to the reference", "per token" + shift, tuple(kl), None if kl else NOTE_NO_KL))

    if has("response_length_mean"):
        length = Series(
            "response_length",
            label("response_length"),
            curve(steps, "response_length", band, zs),
            band_text,
        )
        out.append(Panel("length", "Response length", "tokens" + shift, (length,)))
    elif has("response_chars_mean"):
        # A summary written before the character quantiles were kept has only their mean: no band then.
        chars_band = band if "response_chars_std" in steps.columns else None
        length = Series(
            "response_chars",
            label("response_chars"),
            curve(steps, "response_chars", chars_band, zs),
            band_text if chars_band else None,
        )
        out.append(Panel("length", "Response length", "characters" + shift, (length,), NOTE_CHARS))
    else:
        out.append(Panel("length", "Response length", "tokens", (), NOTE_NO_LENGTH))

    win = []
    # The tie rate beside the win rate: with a verifier's 0 / 1 rewards most responses may tie their
    # reference, which a win rate alone hides.
    for key, dashed in (("win_rate", False), ("tie_rate", True)):
        if has_ref and has(key):
            win.append(Series(key, label(key), curve(steps, key, None, zs, mean=False), dashed=dashed))
    if has("zero_spread_share"):
        name = step_label("zero_spread_share", "share of groups whose responses all got the same reward")
        win.append(
            Series(
                "zero_spread_share",
                name,
                curve(steps, "zero_spread_share", None, zs, mean=False),
                dashed=True,
            )
        )
    title = "Win rate against the reference" if has_ref else "Win rate"
    out.append(
        Panel("win", title, "share" + shift, tuple(win), None if has_ref else NOTE_NO_WIN, percent=True)
    )
    return out


def _span(rng: tuple[float, float]) -> str:
    """'0 – 3': a range's two ends as the legend shows them (up to 4 significant digits)."""
    return f"{rng[0]:.4g} – {rng[1]:.4g}"


# A step whose largest response carries more than this share of its KL is flagged on the KL curve: its
# per-token mean says more about that response than about the policy.
KL_TOP_FLAG = 0.5


def kl_series(
    steps: pl.DataFrame, band: str, zero_shift: bool, has: Callable[[str], bool] | None = None
) -> list[Series]:
    """The KL panel's own series: the per-token mean (Σ k3 / Σ positions) with the band of the responses'
    per-token means, the largest response's per-token mean (dashed), and the steps where one response
    carries more than :data:`KL_TOP_FLAG` of the step's KL (points). Empty without KL."""
    has = values_in(steps, KL_COLUMNS) if has is None else has  # (panels' own, when it asks)
    if not has("kl_token_mean"):
        return []
    lo, hi = band_exprs("kl_mean", band) if "kl_mean_std" in steps.columns else (pl.lit(None), pl.lit(None))
    y = _finite("kl_token_mean")
    # The three curves in one pass over the summary (each row one step): the largest response's per-token
    # mean, and the per-token mean again at the steps one response dominates.
    extra = {}
    if "kl_mean_max" in steps.columns:
        extra["top"] = _finite("kl_mean_max")
    if "kl_sum_total" in steps.columns:
        extra["flagged"] = pl.when(kl_top_share() > KL_TOP_FLAG).then(y)
    every = steps.select(
        pl.col("step"), y.alias("y"), lo.alias("lo"), hi.alias("hi"), *(e.alias(k) for k, e in extra.items())
    ).sort("step")
    frames = {
        "main": every.select("step", "y", "lo", "hi"),
        "top": None,
        "flagged": None,
        **{k: every.select("step", pl.col(k).alias("y")) for k in extra},
    }
    if zero_shift:
        first = frames["main"].get_column("y").drop_nulls()
        shift = float(first[0]) if first.len() else 0.0
        frames = {
            k: f.with_columns(pl.exclude("step") - shift) if f is not None else None
            for k, f in frames.items()
        }
    out = [Series("kl_token_mean", step_label("kl_token_mean", f"{label('kl')}, per-token mean"), frames["main"],
                  f"{BANDS[band]} of the responses' per-token means")]  # fmt: skip
    if frames["top"] is not None and has("kl_mean_max"):
        out.append(
            Series("kl_mean_max", "the step's largest response per-token mean", frames["top"], dashed=True)
        )
    if frames["flagged"] is not None and frames["flagged"].get_column("y").drop_nulls().len():
        name = f"one response carries over {KL_TOP_FLAG:.0%} of the step's KL"
        out.append(Series("kl_top_share", name, frames["flagged"], flags=True))
    return out
