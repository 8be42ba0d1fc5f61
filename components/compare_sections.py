"""The compare page's sections drawn: the figures, notes and list titles of each section that
``data.compare.sections`` composes, built here once for the page's callbacks and for the API's answer
(``exact=True``: full precision, where the page sends float32)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc

from components import compare_figures as cf
from components.compare_views import card, notes_list, trainer_outputs
from components.layout import GRAPH_CONFIG

# Curves drawn with a percent axis; the id of each curve's chart is CURVE + its metric key (see curve_ids).
PERCENT = ("win_rate", "zero_spread_share")
CURVE = "compare-curve-"
# Each solved list shows this many prompts (the largest difference in the run's favour first).
SOLVED_SHOWN = 50


def curve_ids(keys: Sequence[str]) -> dict[str, str]:
    """Each metric key's chart id: ``compare-curve-<key>`` with every character but letters, digits, ``_``
    and ``-`` as ``-`` (a reward component's key holds ``:`` and ``.``), and ``-<n>`` after one that would
    repeat another's."""
    out: dict[str, str] = {}
    for key in keys:
        cid = CURVE + re.sub(r"[^A-Za-z0-9_-]", "-", key)
        n, base = 2, cid
        while cid in out.values():
            cid, n = f"{base}-{n}", n + 1
        out[key] = cid
    return out


def curve_figures(
    curves, colors: Mapping[str, str], *, x_title: str, smoothed: bool, band_label: str | None,
    banded: Sequence[str], exact: bool = False,
) -> list[tuple[str, str, list[str], object]]:  # fmt: skip
    """One chart per overlay of a ``data.compare.sections.Curves``: ``(id, title, notes, figure)``, the
    band drawn for the ``banded`` metrics (labelled ``band_label``)."""
    ids = curve_ids([ov.metric for ov in curves.overlays])
    out = []
    for ov in curves.overlays:
        fig = cf.overlay_figure(
            [(ln.run, colors[ln.run], ln.frame) for ln in ov.lines], y_title=ov.unit, x_title=x_title,
            smoothed=smoothed, band_label=band_label if ov.metric in banded else None,
            percent=ov.metric in PERCENT, exact=exact,
        )  # fmt: skip
        out.append((ids[ov.metric], ov.label[:1].upper() + ov.label[1:], [n.text for n in ov.notes], fig))
    return out


def curve_cards(charts: Sequence[tuple[str, str, list[str], object]]) -> dbc.Row:
    """The charts of :func:`curve_figures` as cards, two a row, each with its notes."""
    cols = [
        dbc.Col(
            card(title, [notes_list(notes), dcc.Graph(id=cid, figure=fig, config=GRAPH_CONFIG, style={"height": "280px"})]),
            lg=6,
        )
        for cid, title, notes, fig in charts
    ]  # fmt: skip
    return dbc.Row(cols, className="g-3")


def trainer_section_outputs(t, colors: Mapping[str, str], *, x_title: str, smoothed: bool, agreement_id: str,
                            exact: bool = False) -> tuple:  # fmt: skip
    """:func:`components.compare_views.trainer_outputs` of a ``data.compare.sections.Trainer``."""
    lines = [(ln.run, colors[ln.run], ln.frame) for ln in t.overlay.lines] if t.overlay else []
    checks = [(run, colors[run], [c.as_row() for c in rows]) for run, rows in t.checks]
    return trainer_outputs(lines, t.key, x_title, smoothed, t.notes, checks, agreement_id, exact=exact)


def distribution_figure(d, colors: Mapping[str, str]):
    """The reward distributions of a ``data.compare.sections.Distribution``, one colour per run."""
    lines = [(b.run, colors[b.run], b.step, b.frame) for b in d.bars]
    return cf.distribution_figure(lines, x_title=d.x_title, discrete=d.discrete)


def pair_figures(p, colors: Mapping[str, str], exact: bool = False) -> tuple:
    """The paired scatter, the differences' histogram and the difference over steps of a
    ``data.compare.sections.Pairing``."""
    paired = p.paired
    scatter = cf.paired_scatter(
        p.scatter, a=paired.a, b=paired.b, a_color=colors[paired.a], b_color=colors[paired.b],
        threshold=paired.threshold, exact=exact,
    )  # fmt: skip
    hist = cf.diff_histogram(p.bars, label=p.diff_label, discrete=p.discrete)
    over = cf.over_steps_figure(paired.over_steps, label="mean difference", runs=(paired.a, paired.b))
    return scatter, hist, over


def pair_notes(notes: Sequence[str]) -> list[str]:
    """The pairing's notes as the page writes them: one paragraph, the headline first."""
    return [notes[0], *(" " + n for n in notes[1:])] if notes else []


def solved_title(p, side: str) -> str:
    """The title of the list of prompts solved by run ``side`` (``a`` or ``b``) and not by the other."""
    name, other = (p.paired.a, p.paired.b) if side == "a" else (p.paired.b, p.paired.a)
    return f"Solved by {name}, not by {other} ({p.solved[side].height})"
