"""A view's answer as ONE self-contained HTML file (issue 37): a header line (run, page, store, when taken, the
board's URL), the notices, each figure interactive (Plotly's figure JSON and plotly.min.js inlined), each
table's first rows and each token strip as coloured spans; nothing is fetched when it is opened from disk.

Model text is data: every text is escaped, and the figures' JSON is embedded with ``<``, ``>`` and ``&``
written as ``\\u003c`` … so that no text in it can close its script tag.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import plotly
import plotly.io as pio

from api.answer import Answer, Strip, Table, figure_title, plain

APP_CSS = Path(__file__).resolve().parents[1] / "assets" / "app.css"
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
# The browser may run the file's own inline scripts and styles and show data: images (Plotly's mode bar),
# and fetch nothing: no script, style, font, image, frame or connection from anywhere.
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
# A colour the strip may paint a token with (what components/token_strip.py writes): anything else is left
# unpainted rather than put into a style attribute.
_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}|rgba?\(\s*[\d.]+\s*(,\s*[\d.]+\s*){2,3}\)")


@dataclass(frozen=True)
class SnapshotLimits:
    """How much of a view a snapshot holds (the file says what it left out): a table's first ``rows`` rows,
    a strip's first ``tokens`` tokens; a cell's text is cut at ``cell_chars`` characters."""

    rows: int = 200
    tokens: int = 5000
    cell_chars: int = 2000


LIMITS = SnapshotLimits()


@cache
def _plotly_js() -> str:
    # No "</script" may end the inlined library early (plotly.js 4.1 has none; a later one might, in a string).
    return re.sub(r"</(script)", r"<\\/\1", PLOTLY_JS.read_text(encoding="utf-8"), flags=re.IGNORECASE)


@cache
def _app_css() -> str:
    return APP_CSS.read_text(encoding="utf-8")


# The snapshot's own layout (the app's pages use Bootstrap; a snapshot needs only these few rules).
OWN_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; padding: 1rem 1.5rem;
  max-width: 1400px; color: #212529; }
.snap-header { background: #212529; color: #f8f9fa; padding: 0.5rem 0.75rem; border-radius: 0.25rem; }
.snap-header a { color: #9ec5fe; word-break: break-all; }
.snap-notice { background: #fff3cd; border: 1px solid #ffe69c; color: #664d03; padding: 0.4rem 0.75rem;
  border-radius: 0.25rem; margin: 0.5rem 0; white-space: pre-wrap; }
.snap-section { background: #fff; border: 1px solid #dee2e6; border-radius: 0.25rem; margin: 0.75rem 0;
  padding: 0.5rem 0.75rem; }
.snap-section h2 { font-size: 0.95rem; margin: 0 0 0.4rem; }
.snap-cut { color: #6c757d; font-size: 0.8rem; margin: 0.25rem 0; }
.snap-table-wrap { overflow-x: auto; max-height: 40rem; }
table.snap-table { border-collapse: collapse; font-size: 0.8rem; }
table.snap-table th, table.snap-table td { border: 1px solid #dee2e6; padding: 0.2rem 0.4rem; vertical-align: top;
  text-align: left; white-space: pre-wrap; overflow-wrap: break-word; max-width: 40rem; }
table.snap-table th { background: #f1f3f5; position: sticky; top: 0; }
.snap-view { font-size: 0.8rem; color: #495057; }
"""

_SCRIPT = """
(function () {
  document.querySelectorAll("script[data-figure]").forEach(function (node) {
    var fig = JSON.parse(node.textContent);
    var div = document.getElementById(node.getAttribute("data-figure"));
    Plotly.newPlot(div, fig.data || [], fig.layout || {}, {displaylogo: false, responsive: true});
  });
})();
"""


def script_json(value: Any) -> str:
    """``value`` as JSON safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the JavaScript line
    separators written as escapes (they can only occur inside JSON strings, where the escape means the same)."""
    text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(ch, esc)
    return text


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def cell_text(value: Any, limit: int = LIMITS.cell_chars) -> str:
    """A table cell as plain text: numbers at full precision, lists joined by ``; ``, objects as JSON, none
    as empty; cut at ``limit`` characters (with an ellipsis)."""
    value = plain(value)
    if value is None:
        text = ""
    elif isinstance(value, list):
        text = "; ".join(cell_text(v, limit) for v in value)
    elif isinstance(value, dict):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def store_line(store: dict) -> str:
    """What the header says of the store(s) read: ``format 16, version 12`` (one per run where an answer
    read several)."""
    if not store:
        return "no store"
    if "format" in store:
        return f"store format {store.get('format')}, version {store.get('version')}"
    return "; ".join(f"{run}: {store_line(s)}" for run, s in store.items() if isinstance(s, dict))


def _header(answer: Answer, name: str, url: str, taken: dt.datetime, seconds: float) -> str:
    when = taken.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [
        f"<strong>RL Logging Board</strong> · page {_e(name)} ({_e(answer.page)})",
        f"run {_e(answer.run)}" if answer.run else "",
        _e(store_line(answer.store)),
        f"taken {when} in {seconds:.2f} s",
        f'view <a href="{_e(url)}" rel="noreferrer">{_e(url)}</a>' if url.startswith(("http://", "https://"))
        else f"view <code>{_e(url)}</code>",
    ]  # fmt: skip
    return '<header class="snap-header" id="snap-header">' + " · ".join(p for p in parts if p) + "</header>"


def _figure(i: int, fid: str, fig: Any, title: str | None) -> str:
    div = f"snap-fig-{i}"
    data = pio.to_json(fig, validate=False, engine="json")
    return (
        f'<section class="snap-section snap-figure" data-id="{_e(fid)}"><h2>{_e(title or fid)}</h2>'
        f'<div id="{div}" class="snap-plot"></div>'
        f'<script type="application/json" data-figure="{div}">{script_json(data)}</script></section>'
    )


def _table(tid: str, table: Table, limit: int) -> str:
    rows = table.rows[:limit]
    total = table.total if table.total is not None else len(table.rows)
    notes = []
    if table.cut_off:
        notes.append(table.cut_off)
    if len(table.rows) > limit:
        notes.append(f"The first {limit:,} of {total:,} rows are in this snapshot (its limit).")
    elif total > len(table.rows):
        notes.append(f"The first {len(table.rows):,} of {total:,} rows, as the page shows them.")
    head = "".join(f"<th>{_e(table.labels.get(c, c))}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(cell_text(r.get(c)))}</td>" for c in table.columns) + "</tr>" for r in rows
    )
    cut = "".join(f'<p class="snap-cut">{_e(n)}</p>' for n in notes)
    return (
        f'<section class="snap-section snap-tbl" data-id="{_e(tid)}"><h2>{_e(tid)}</h2>{cut}'
        f'<div class="snap-table-wrap"><table class="snap-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div></section>"
    )


def _ink(colour: str) -> str:
    """Dark or light text for a background ``colour`` (``#rrggbb`` or ``rgb(…)``), by its luminance."""
    if colour.startswith("#") and len(colour) >= 7:
        rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    elif colour.startswith("rgb"):
        rgb = [float(x) for x in re.findall(r"[\d.]+", colour)[:3]]
    else:
        return ""
    lum = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) / 255
    return "color:#fff;" if lum < 0.5 else ""


def _strip(sid: str, strip: Strip, limit: int) -> str:
    spans = []
    for i, token in enumerate(strip.tokens[:limit]):
        colour = strip.colours[i] if i < len(strip.colours) else None
        value = strip.values[i] if i < len(strip.values) else None
        mark = strip.marks[i] if i < len(strip.marks) else ""
        style = f"background-color:{colour};{_ink(colour)}" if colour and _COLOUR.fullmatch(colour) else ""
        title = f"{strip.label}: {'—' if value is None else value}" + (f" ({mark})" if mark else "")
        cls = {"pad": "token-pad", "masked": "token-masked"}.get(mark, "")
        spans.append(
            f'<span class="{cls}" style="{_e(style)}" title="{_e(title)}" data-i="{i}">{_e(token)}</span>'
        )
    cut = ""
    if len(strip.tokens) > limit:
        cut = f'<p class="snap-cut">The first {limit:,} of {len(strip.tokens):,} tokens are in this snapshot (its limit).</p>'  # fmt: skip
    caption = f'<p class="snap-cut">{_e(strip.caption)}</p>' if strip.caption else ""
    return (
        f'<section class="snap-section snap-strip" data-id="{_e(sid)}"><h2>{_e(strip.label)}</h2>{caption}{cut}'
        f'<div class="token-strip">{"".join(spans)}</div></section>'
    )


def render(
    answer: Answer,
    name: str,
    url: str,
    taken: dt.datetime | None = None,
    seconds: float = 0.0,
    limits: SnapshotLimits = LIMITS,
) -> str:
    """The HTML file of ``answer`` (the view called ``name``, at ``url`` on the board), taken at ``taken``
    (default now) in ``seconds``; tables and strips bounded by ``limits``."""
    taken = taken or dt.datetime.now(dt.UTC)
    body = [_header(answer, name, url, taken, seconds)]
    body += [f'<div class="snap-notice" role="alert">{_e(n)}</div>' for n in answer.notices]
    body += [
        _figure(i, fid, fig, answer.titles.get(fid) or figure_title(fig))
        for i, (fid, fig) in enumerate(answer.figures.items())
    ]
    body += [_strip(sid, s, limits.tokens) for sid, s in answer.strips.items()]
    order = sorted(answer.tables, key=lambda t: t != answer.main)  # the main table first
    body += [_table(tid, answer.tables[tid], limits.rows) for tid in order]
    body.append(
        '<details class="snap-section snap-view"><summary>View state</summary>'
        f"<pre>{_e(json.dumps(plain(answer.view), indent=1, ensure_ascii=False))}</pre></details>"
    )
    plotly_js = f"<script>{_plotly_js()}</script><script>{_SCRIPT}</script>" if answer.figures else ""
    title = f"{name} · {answer.run or 'all runs'} · RL Logging Board snapshot"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="referrer" content="no-referrer"><title>{_e(title)}</title>'
        f"<style>{_app_css()}\n{OWN_CSS}</style></head>\n<body>{''.join(body)}\n{plotly_js}</body></html>\n"
    )


def filename(name: str, run: str | None, taken: dt.datetime) -> str:
    """``<page>-<run>-<time>.html`` with only letters, digits, ``.``, ``_`` and ``-`` (a run's name is any
    folder name), at most 150 characters."""
    stamp = taken.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name}-{run or 'all'}").strip("._") or "view"
    return f"{safe[:120]}-{stamp}.html"
