"""The one theme: a colour per metric (its lines, bars and markers in every figure), a colour scale per
per-token metric (the token strip), the colours of a sign in tables, the figures' chrome and the grids'
look. Builders take their colours from here, so a metric looks the same on every page.
"""

from __future__ import annotations

# ---- one colour per metric -------------------------------------------------------------------------------

METRIC_COLOURS = {
    "reward": "#0d6efd",
    "ref_reward": "#6c757d",
    "reward_gain": "#198754",
    # KL and log-ratio per token; their per-step means on the reward page have the same colours.
    "kl": "#6f42c1",
    "log_ratio": "#fd7e14",
    "response_length": "#20c997",
    "response_chars": "#20c997",
    "win_rate": "#198754",
    "tie_rate": "#adb5bd",
    "zero_spread_share": "#dc3545",
    "logprob": "#1f77b4",
    "ref_logprob": "#999999",
    "value": "#9467bd",
    "return": "#2ca02c",
    # Reward-hacking aids of the reward page (one per signal).
    "repetition": "#b8860b",
    "truncated_share": "#dc3545",
    "match_share": "#0dcaf0",
    # The critic's health per step (data/critic_curves.py).
    "explained_variance": "#9467bd",
    "value_error_abs_pooled": "#2ca02c",
    "value_loss": "#8c564b",
    # A step flagged on the KL curve (one response carries most of its KL).
    "kl_top_share": "#dc3545",
    # The inference–trainer gap (the gap page) and a correction's shares.
    "infer_gap": "#d63384",
    "infer_gap_abs_mean": "#d63384",
    "infer_gap_abs_max": "#6610f2",
    "infer_gap_tail_share": "#e8590c",
    "correction_tokens": "#dc3545",
    "correction_responses": "#0d6efd",
}
# Columns of the per-step summary shown as a metric's curve: the metric they summarise.
STEP_COLUMNS = {
    "kl_token_mean": "kl",
    "kl_mean_max": "kl",
    "log_ratio_token_mean": "log_ratio",
    "repetition_mean": "repetition",
}
OTHER = "#495057"
# The trainer's own per-token fields, in the order the file first has them.
FILE_FIELD_COLOURS = ("#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def colour(key: str) -> str:
    """The colour of a metric (or of a per-step column summarising one); :data:`OTHER` for anything else."""
    return METRIC_COLOURS.get(STEP_COLUMNS.get(key, key), OTHER)


def rgba(hex_colour: str, alpha: float) -> str:
    """``#rrggbb`` with an opacity, as CSS ``rgba(...)`` (bands, bar fills)."""
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


# ---- colour scales ---------------------------------------------------------------------------------------

# Colour stops (position in [0, 1] of the scale's range, RGB). Diverging: red below 0, white at 0, blue above.
DIVERGING = (
    (0.0, (178, 24, 43)),
    (0.25, (239, 138, 98)),
    (0.5, (247, 247, 247)),
    (0.75, (103, 169, 207)),
    (1.0, (33, 102, 172)),
)
BLUES = ((0.0, (247, 251, 255)), (0.5, (158, 202, 225)), (1.0, (8, 81, 156)))
ORANGES = ((0.0, (255, 245, 235)), (0.5, (253, 174, 107)), (1.0, (217, 72, 1)))
PURPLES = ((0.0, (252, 251, 253)), (0.5, (188, 189, 220)), (1.0, (84, 39, 143)))
# The sequential scale of an unsigned per-token metric; BLUES for the others.
SEQUENTIAL_SCALES = {"kl": ORANGES, "ref_prob": PURPLES}


def colour_stops(metric: str, signed: bool):
    """The colour stops of a per-token metric's scale: diverging for signed metrics, its sequential ramp
    otherwise."""
    if signed:
        return DIVERGING
    return SEQUENTIAL_SCALES.get(metric, BLUES)


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#" + "".join(f"{c:02x}" for c in rgb)


# A value below / above 0 drawn alone (a token reward bar): the diverging scale's two ends.
BELOW_ZERO = _hex(DIVERGING[0][1])
ABOVE_ZERO = _hex(DIVERGING[-1][1])
# ColorBrewer "Blues", light to dark, spelled out for the heatmap's share: plotly.js's own "Blues" runs the
# other way, and only Plotly's (skipped) Python-side validation would translate the name.
HEATMAP_SCALE = [
    [i / 8, c]
    for i, c in enumerate(
        ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"]
    )
]

# ---- figures' chrome -------------------------------------------------------------------------------------

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
TEXT = "#212529"
MUTED = "#6c757d"
GRID = "#e9ecef"
ZERO_LINE = "#ced4da"
AXIS_LINE = "#adb5bd"
MARKER = "#495057"  # the selected step's dotted line
HIGHLIGHT = "#fff3cd"  # a selected grid row, a group without learning signal
ON_DARK = "#fff"  # text on a dark background (a token of the strip)

# ---- tables ----------------------------------------------------------------------------------------------

NEGATIVE = "#b02a37"
POSITIVE = "#146c43"


def sign_style(v) -> dict:
    """The inline style of a signed number in a table: red below 0, green above."""
    if isinstance(v, int | float) and v == v and v != 0:
        return {"color": POSITIVE if v > 0 else NEGATIVE}
    return {}


# The same in an AG Grid cell.
SIGN_STYLE_JS = (
    f"params.value == null ? {{}} : params.value < 0 ? {{color: '{NEGATIVE}'}} : "
    f"params.value > 0 ? {{color: '{POSITIVE}'}} : {{}}"
)
GRID_THEME_JS = (
    "themeQuartz.withParams({spacing: 3, fontSize: 12, headerFontSize: 12, rowHeight: 26, "
    "headerHeight: 30, wrapperBorderRadius: 4, headerBackgroundColor: '#f1f3f5', "
    f"oddRowBackgroundColor: '#fafbfc', selectedRowBackgroundColor: '{HIGHLIGHT}', "
    "fontFamily: 'inherit'})"
)
# Bootstrap colours of the prompts' trend badges.
TREND_COLOURS = {
    "improved": "success",
    "regressed": "danger",
    "flat": "secondary",
    "never": "warning",
    "single": "light",
}

# ---- comparing runs --------------------------------------------------------------------------------------

# One colour per run on the compare page, by the run's position in its URL, on every chart and table of it
# (colour-blind safe: Okabe & Ito's palette without its yellow).
RUN_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000", "#999999")
# Bootstrap colours of the agreement check's verdicts (the trainer's logs against the rollouts).
AGREEMENT_COLOURS = {"agrees": "success", "disagrees": "danger", "not comparable": "secondary"}
# Text only in the first / only in the second of two compared responses (the word diff).
DIFF_DELETE = {"background": "#f8d7da", "textDecoration": "line-through"}
DIFF_INSERT = {"background": "#d1e7dd", "textDecoration": "underline"}


def run_colours(runs) -> dict[str, str]:
    """Each compared run's colour, by its position among the runs."""
    return {r: RUN_COLOURS[i % len(RUN_COLOURS)] for i, r in enumerate(runs)}
