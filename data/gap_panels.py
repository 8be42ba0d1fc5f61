"""The gap page's curves over steps (pure: the gap's per-step columns and a correction's preview in, reward
page :class:`~data.curve_panels.Panel` s out; :func:`page_panels` reads them of a store): each point opens
its step's responses, the largest first."""

from __future__ import annotations

import polars as pl

from data.curve_panels import BANDS, Panel, Series, band_exprs, curve
from data.infer_gap import Preview, correction_preview, gap_steps
from data.metrics import label

# Each series' key: the column its point's responses are sorted by (data.views.links.gap_sorted).
CORRECTION_TOKENS, CORRECTION_RESPONSES = "correction_tokens", "correction_responses"
SORT_OF = {
    "infer_gap_abs_mean": "infer_gap_abs_mean",
    "infer_gap_abs_max": "infer_gap_abs_max",
    "infer_gap_tail_share": "infer_gap_tail_share",
    # A correction's point: the step's responses by their largest |Δ| (the sequence rule: by mean |Δ|).
    CORRECTION_TOKENS: "infer_gap_abs_max",
    CORRECTION_RESPONSES: "infer_gap_abs_max",
}
NO_GAP = (
    "No inference engine's log-probs beside the trainer's in this run (generation_logprobs, rollout_log_probs "
    "or inference_logprobs): the gap cannot be computed."
)
NO_GAP_SHORT = "no inference log-probs in this run"  # what an empty chart says (its card's note says more)


def gap_panels(steps: pl.DataFrame, band: str) -> list[Panel]:
    """The mean / max |Δ| per response (the responses' band) and the tail share pooled over the step's
    positions (the responses' tail shares as the band), from :func:`data.infer_gap.gap_steps`."""
    if steps.height == 0:
        return [
            Panel(k, t, "", (), NO_GAP, empty=NO_GAP_SHORT)
            for k, t in (("gap", "Gap |Δ|"), ("tail", "Gap tail"))
        ]
    text = BANDS[band]
    abs_max = steps.select("step", pl.col("infer_gap_abs_max_p50").alias("y")).sort("step")
    lo, hi = band_exprs("infer_gap_tail_share", band)
    tail = steps.select("step", pl.col("infer_gap_tail_pooled").alias("y"), lo.alias("lo"), hi.alias("hi"))
    gap = Panel(
        "gap",
        "Inference–trainer gap |Δ| per response (trainer − inference log-prob)",
        "nats",
        (
            Series("infer_gap_abs_mean", label("infer_gap_abs_mean") + ", step mean",
                   curve(steps, "infer_gap_abs_mean", band), f"responses' {text}"),
            Series("infer_gap_abs_max", label("infer_gap_abs_max") + ", step median", abs_max, dashed=True),
        ),
        "Click a point: its step's responses, the largest first.",
    )  # fmt: skip
    tail_panel = Panel(
        "tail",
        f"Gap tail: tokens with {label('infer_gap_tail_share').removeprefix('gap tail share (').rstrip(')')}",
        "share of the step's tokens",
        (Series("infer_gap_tail_share", "tail share, pooled over the step's tokens", tail.sort("step"),
                f"responses' tail share {text}"),),
        "Pooled exactly from each response's counts (tokens in the tail ÷ tokens with both log-probs). "
        "Click a point: its step's responses, the largest tail share first.",
        percent=True,
    )  # fmt: skip
    return [gap, tail_panel]


def page_panels(store, band: str, rule: str, c: float, step: int | None) -> list[Panel]:
    """The gap page's three charts of a store: :func:`gap_panels` of its gap per step (``band`` the
    responses' band), then :func:`correction_panel` of ``rule`` at ``c`` (token shares counted around
    ``step``, the selected one)."""
    return [*gap_panels(gap_steps(store), band), correction_panel(correction_preview(store, rule, c, step))]


def correction_panel(preview: Preview) -> Panel:
    """A correction's shares per step: of the tokens it clips or masks and of the responses it touches."""
    r = preview.rule
    title = f"{r.name} at C = {preview.c:g} ({r.touches})"
    if preview.frame.height == 0:
        return Panel("correction", title, "", (), NO_GAP, empty=NO_GAP_SHORT)
    f = preview.frame.sort("step")
    verb = "clipped" if r.key == "tis" else "masked"
    series = (
        Series(CORRECTION_TOKENS, f"tokens {verb}", f.select("step", pl.col("token_share").alias("y"))),
        Series(CORRECTION_RESPONSES, f"responses with a token {verb}" if r.key != "seq" else "responses dropped",
               f.select("step", pl.col("response_share").alias("y")), dashed=True),
    )  # fmt: skip
    return Panel(
        "correction", title, "share", series, f"{preview.note()} {correction_click(r.key)}", percent=True
    )


def correction_click(rule: str) -> str:
    """What a correction's point opens, said so: the responses page sorts by the gap but knows no correction
    (its rows' token links carry none), so only the step's largest-|Δ| link marks the tokens ``rule`` touches."""
    by = "mean |Δ|" if rule == "seq" else "max |Δ|"
    return (
        f"Click a point: its step's responses by {by}, the largest first; that page does not apply the "
        "correction, so its token links show no marks (the link to the step's largest-|Δ| response does)."
    )
