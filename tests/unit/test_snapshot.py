"""api.snapshot: a view's answer as one HTML file that fetches nothing and runs no model text (what a browser
makes of it: tests/browser/test_snapshot.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
from html.parser import HTMLParser

import plotly.graph_objects as go

from api.answer import Answer, Strip, Table
from api.snapshot import (
    CSP,
    OWN_CSS,
    SnapshotLimits,
    _app_css,
    _plotly_js,
    cell_text,
    filename,
    render,
    script_json,
)

SCRIPT = "<script>alert(1)</script>"
CLOSE = "</script><script>window.__pwned = 'figure'</script>"
IMG = "<img src=x onerror=\"window.__pwned='strip'\">"
TAKEN = dt.datetime(2026, 11, 29, 13, 40, 5, tzinfo=dt.UTC)


def hostile_answer(rows: int = 3, tokens: int = 4) -> Answer:
    """An answer whose model text is markup: a table row holding ``<script>alert(1)</script>`` and
    ``</script>``, a figure whose trace name and hover text close a script tag, a strip token that is an
    ``<img onerror>``."""
    fig = go.Figure(go.Bar(x=[0, 1, 2], y=[3, 1, 2], name=CLOSE, hovertext=[CLOSE, SCRIPT, "ok"]))
    fig.update_layout(title="reward of step 5")
    table_rows = [{"sample": "s0", "response": SCRIPT, "reward": 0.1 + 0.2}]
    table_rows += [
        {"sample": f"s{i}", "response": f"{CLOSE} {i}", "reward": float(i)} for i in range(1, rows)
    ]
    strip = Strip(
        metric="kl",
        label="KL per token",
        tokens=["Hello", IMG, " world", *[f" t{i}" for i in range(tokens - 3)]],
        values=[0.0, 1.5, None, *[0.1] * (tokens - 3)],
        colours=["#ffffff", "#b2182b", "", *["rgb(10, 20, 30)"] * (tokens - 3)],
        marks=["", "", "pad", *[""] * (tokens - 3)],
        caption="colours from 0 to 1.5",
    )
    return Answer(
        "/tokens",
        {"run": "r<1>", "sample": SCRIPT},
        run="r<1>",
        figures={"tokens-curve": fig},
        tables={
            "tokens-table": Table(
                ["sample", "response", "reward"], table_rows, {"reward": "reward"}, total=rows
            )
        },
        main="tokens-table",
        strips={"tokens-strip": strip},
        notices=[f"Unknown run {SCRIPT!r}: the first run is shown."],
        store={"format": 16, "version": "r-abc:3"},
    )


class _Tags(HTMLParser):
    """Every start tag and its attributes, and the text of each element (script text apart)."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        (self.scripts if self._in == "script" else self.text).append(data)


def _parse(doc: str) -> _Tags:
    p = _Tags()
    p.feed(doc)
    return p


def test_snapshot001_model_text_stays_text():
    """The markup in model text is escaped wherever it lands: no tag of it is a tag of the file (only the
    file's own script elements), and its text reads as written."""
    doc = render(hostile_answer(), "tokens", "/tokens?run=r%3C1%3E", TAKEN, 0.25)
    parsed = _parse(doc)
    names = [t for t, _ in parsed.tags]
    assert "img" not in names
    scripts = [a for t, a in parsed.tags if t == "script"]
    # The figure's JSON, plotly.js and the script that draws the figures: nothing else.
    assert scripts == [{"type": "application/json", "data-figure": "snap-fig-0"}, {}, {}]
    shown = "".join(parsed.text)
    assert SCRIPT in shown and IMG in shown and CLOSE in shown
    assert doc.count("</script>") == 3


def test_snapshot002_figure_json_cannot_close_its_script():
    """The figure is embedded as JSON with <, > and & escaped, and parses back to the very figure."""
    assert (
        script_json({"a": "</script>&<!--\u2028"}) == '{"a": "\\u003c/script\\u003e\\u0026\\u003c!--\\u2028"}'
    )
    doc = render(hostile_answer(), "tokens", "/tokens", TAKEN)
    raw = re.search(r'<script type="application/json" data-figure="snap-fig-0">(.*?)</script>', doc, re.S)[1]
    assert "<" not in raw and ">" not in raw and "&" not in raw
    fig = json.loads(raw)
    assert fig["data"][0]["name"] == CLOSE and fig["data"][0]["hovertext"] == [CLOSE, SCRIPT, "ok"]
    assert fig["layout"]["title"]["text"] == "reward of step 5"


def test_snapshot003_nothing_to_fetch():
    """No <link>, no src or srcset attribute, a CSP that forbids every fetch, and every url( in the inlined
    styles a data: URI (there are none)."""
    doc = render(hostile_answer(), "tokens", "/tokens", TAKEN)
    tags = _parse(doc.replace(_plotly_js(), "")).tags
    assert not [t for t, _ in tags if t in ("link", "iframe", "object", "embed", "img", "base")]
    assert not [(t, a) for t, a in tags if {"src", "srcset", "background", "poster"} & set(a)]
    csp = [a for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [{"http-equiv": "Content-Security-Policy", "content": CSP}]
    assert "default-src 'none'" in CSP and "connect-src 'none'" in CSP
    for css in (_app_css(), OWN_CSS):
        assert all(u.startswith("data:") for u in re.findall(r"url\(\s*['\"]?([^)'\"]*)", css))
    assert "@import" not in _app_css() + OWN_CSS


def test_snapshot004_header_notices_and_strip():
    """The header names the page, run, store and time; the notice is there; each token is a span with its
    colour (a colour that is not one is not put into a style) and its value in its title."""
    doc = render(hostile_answer(), "tokens", "/tokens?run=r", TAKEN, 0.25)
    header = re.search(r'<header class="snap-header" id="snap-header">(.*?)</header>', doc, re.S)[1]
    assert "page tokens (/tokens)" in header and "run r&lt;1&gt;" in header
    assert (
        "store format 16, version r-abc:3" in header and "taken 2026-11-29 13:40:05 UTC in 0.25 s" in header
    )
    assert "view <code>/tokens?run=r</code>" in header
    assert doc.count('class="snap-notice"') == 1
    spans = re.findall(r'<span class="([^"]*)" style="([^"]*)" title="([^"]*)" data-i="\d+">', doc)
    assert spans[0] == ("", "background-color:#ffffff;", "KL per token: 0.0")
    assert spans[1] == ("", "background-color:#b2182b;color:#fff;", "KL per token: 1.5")
    assert spans[2] == ("token-pad", "", "KL per token: — (pad)")
    assert spans[3][1] == "background-color:rgb(10, 20, 30);color:#fff;"
    strip = Strip("kl", "kl", ["a"], [1.0], ['red;background:url(http://x/)"'])
    doc = render(Answer("/tokens", {}, strips={"s": strip}), "tokens", "/tokens", TAKEN)
    assert "url(" not in doc.split("<style>")[0] + doc.split("</style>")[1]


def test_snapshot005_bounded_and_said():
    """A table past the row limit and a strip past the token limit keep their first ones and say so; a long
    cell is cut; numbers keep full precision."""
    doc = render(
        hostile_answer(rows=30, tokens=50), "tokens", "/tokens", TAKEN, limits=SnapshotLimits(10, 20, 50)
    )
    assert doc.count("<tr>") == 1 + 10
    assert "The first 10 of 30 rows are in this snapshot (its limit)." in doc
    assert "The first 20 of 50 tokens are in this snapshot (its limit)." in doc
    assert len(re.findall(r'data-i="\d+"', doc)) == 20
    assert f"<td>{0.1 + 0.2!r}</td>" in doc  # 0.30000000000000004
    assert cell_text("x" * 100, 10) == "x" * 9 + "…"
    assert cell_text([1.5, None, {"a": "<b>"}]) == '1.5; ; {"a": "<b>"}'


def test_snapshot006_filename_is_safe():
    """<page>-<run>-<time>.html of letters, digits, dot, dash and underscore only, whatever the run's name."""
    assert filename("reward", "trl-ppo-small", TAKEN) == "reward-trl-ppo-small-20261129T134005Z.html"
    assert filename("runs", None, TAKEN) == "runs-all-20261129T134005Z.html"
    bad = filename("tokens", '../"; rm -rf /\r\nX: y', TAKEN)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", bad) and not bad.startswith(".") and bad.endswith("Z.html")
    assert len(filename("reward", "r" * 500, TAKEN)) <= 150


def test_snapshot007_no_plotly_without_figures():
    """A view with no figure does not carry plotly.js (4.8 MB)."""
    doc = render(Answer("/", {}, tables={"t": Table(["a"], [{"a": 1}])}, main="t"), "runs", "/", TAKEN)
    assert len(doc) < 20_000 and "Plotly" not in doc
