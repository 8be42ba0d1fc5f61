"""The one theme (components/theme.py): a colour per metric used by every figure, scales, sign colours."""

from __future__ import annotations

import re

import polars as pl

from components import figures, theme
from components.theme import colour
from tests.conftest import REPO_ROOT


def test_theme001_every_curve_has_its_metric_colour():
    """Each series of the reward page's panels is drawn in its metric's colour (a per-step mean in the
    colour of the metric it summarises), and the same metric keeps it in the histogram."""
    from data.curve_panels import panels

    steps = pl.DataFrame(
        {
            "step": [1, 2],
            **{
                f"{c}_{s}": [0.1, 0.2]
                for c in ("reward", "ref_reward", "response_length")
                for s in ("mean", "std")
            },
            "kl_token_mean": [0.1, 0.2],
            "log_ratio_token_mean": [0.1, 0.2],
            "win_rate": [0.5, 0.6],
            "tie_rate": [0.1, 0.1],
        }
    )
    keys = [s.key for p in panels(steps) for s in p.series]
    assert set(keys) >= {"reward", "ref_reward", "kl_token_mean", "log_ratio_token_mean", "win_rate"}
    for k in keys:
        assert colour(k) != theme.OTHER, k
    assert colour("kl_token_mean") == colour("kl") and colour("log_ratio_token_mean") == colour("log_ratio")
    fig = figures.curves_figure(panels(steps)[0].series, y_title="reward")
    lines = {t.name.split(" (")[0]: t.line.color for t in fig.data if t.line.width}
    assert lines == {"reward": colour("reward"), "reference reward": colour("ref_reward")}
    bars = pl.DataFrame({"bin": [0], "lo": [0.0], "hi": [1.0], "count": [1]})
    hist = figures.histogram_figure(bars, label="reward", ref_bars=bars)
    assert (hist.data[0].marker.line.color, hist.data[1].marker.line.color) == (
        colour("reward"),
        colour("ref_reward"),
    )


def test_theme002_scales_and_signs():
    """Signed per-token metrics get the diverging scale, KL its own ramp; signs read red and green."""
    assert theme.colour_stops("log_ratio", True) is theme.DIVERGING
    assert (
        theme.colour_stops("kl", False) is theme.ORANGES and theme.colour_stops("prob", False) is theme.BLUES
    )
    assert (theme.BELOW_ZERO, theme.ABOVE_ZERO) == ("#b2182b", "#2166ac")
    assert theme.sign_style(-1) == {"color": theme.NEGATIVE} and theme.sign_style(2.5) == {
        "color": theme.POSITIVE
    }
    assert theme.sign_style(0) == {} and theme.sign_style(float("nan")) == {} and theme.sign_style(None) == {}
    assert theme.NEGATIVE in theme.SIGN_STYLE_JS and theme.POSITIVE in theme.SIGN_STYLE_JS


def test_theme003_no_colour_outside_the_theme():
    """No page, component or data module spells out a colour: they all come from the theme."""
    hexes = re.compile(r"['\"]#(?:[0-9a-fA-F]{3}){1,2}['\"]|#[0-9a-fA-F]{6}\b")
    found = []
    for folder in ("pages", "components", "data"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            if path.name == "theme.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if hexes.search(line):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}")
    assert found == []
