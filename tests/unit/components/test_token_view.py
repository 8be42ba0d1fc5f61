"""Token page builders (components/token_strip.py, token_js.py, token_figures.py, token_tables.py): colour
scales centred at 0, palette indices, strip data, legend, per-position figures (valid, empty states, long responses) and the top-k table."""

from __future__ import annotations

import json

import orjson
import plotly.graph_objects as go
import polars as pl
import pytest

from components.theme import DIVERGING, ORANGES, colour_stops
from components.token_figures import (
    CHART_POINTS,
    LONG_RESPONSE,
    RESET,
    decimate,
    empty_figure,
    file_fields_figure,
    hover_safe_expr,
    logprob_figure,
    relayout_range,
    token_reward_figure,
    value_figure,
)
from components.token_js import HIGHLIGHT_JS, STRIP_JS, highlight_js, strip_js
from components.token_strip import (
    STRIP_WINDOW,
    colour,
    legend,
    palette,
    palette_index_expr,
    strip_data,
    window_end,
)
from components.token_tables import top_table

LABELS = {
    "logprob": "log-prob (policy)",
    "ref_logprob": "log-prob (reference)",
    "value": "critic value",
    "return": "return (γ = 1)",
    "token_reward": "token reward",
    "log_ratio": "log-ratio",
    "kl": "KL (k3)",
}


def tokens(n: int = 3, **cols) -> pl.DataFrame:
    base = {
        "pos": list(range(n)),
        "token": [f"Ġt{i}" for i in range(n)],
        "text": [f" t{i}" for i in range(n)],
        "is_pad": [False] * n,
    }
    for c in ("logprob", "ref_logprob", "value", "return", "token_reward", "kl", "log_ratio"):
        base[c] = pl.Series(c, cols.get(c, [None] * n), dtype=pl.Float64)
    return pl.DataFrame(base)


def texts(component) -> list[str]:
    """Every string child in a Dash component tree."""
    out = []

    def walk(c):
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list | tuple):
            for x in c:
                walk(x)
        elif c is not None and hasattr(c, "children"):
            walk(c.children)

    walk(component)
    return out


def test_token_view001_diverging_scale_centred_at_zero():
    """0 is the white centre, the range ends are the scale's end colours, values beyond are clipped."""
    assert colour(0.0, -2.0, 2.0, DIVERGING) == "rgb(247,247,247)"
    assert colour(-2.0, -2.0, 2.0, DIVERGING) == "rgb(178,24,43)"
    assert colour(2.0, -2.0, 2.0, DIVERGING) == "rgb(33,102,172)"
    assert colour(9.0, -2.0, 2.0, DIVERGING) == colour(2.0, -2.0, 2.0, DIVERGING)
    # halfway between stops 0.5 (247,247,247) and 0.75 (103,169,207): t = 0.625
    assert colour(0.5, -2.0, 2.0, DIVERGING) == "rgb(175,208,227)"
    assert colour(None, 0, 1, DIVERGING) is None and colour(float("nan"), 0, 1, DIVERGING) is None
    assert colour_stops("log_ratio", True) is DIVERGING and colour_stops("kl", False) is ORANGES


def test_token_view002_palette_indices():
    """Values map to 256 palette steps over lo..hi (clipped); missing and NaN get no colour."""
    df = pl.DataFrame({"v": [-3.0, -1.0, 0.0, 0.5, 1.0, None, float("nan")]})
    idx = df.select(palette_index_expr("v", -1.0, 1.0)).to_series().to_list()
    assert idx == [0, 0, 128, 191, 255, None, None]  # (0.5 + 1) / 2 * 255 = 191.25
    bgs, fgs = palette(DIVERGING)
    assert len(bgs) == 256 and bgs[0] == "rgb(178,24,43)" and bgs[255] == "rgb(33,102,172)"
    assert fgs[0] == "#fff" and fgs[128] is None  # white text on dark red only
    same = pl.DataFrame({"v": [5.0]}).select(palette_index_expr("v", 1.0, 1.0)).item()
    assert same == 128  # a zero-width scale puts everything in the middle


def test_token_view003_strip_data_columns():
    """The strip JSON: positions, display and raw tokens, pad flags, colour indices, hover labels and
    4-significant-digit values (missing -> null, NaN kept as text)."""
    df = tokens(3, kl=[0.0, 1.0, None], logprob=[-1.23456, float("nan"), None]).with_columns(
        pl.Series("is_pad", [False, False, True])
    )
    data = strip_data(df, "kl", 0.0, 1.0, ORANGES, "k1", [("kl", "KL (k3)"), ("logprob", "log-prob")])
    assert data["key"] == "k1" and data["n"] == 3
    d = orjson.loads(data["json"])
    assert d["pos"] == [0, 1, 2]
    assert d["text"] == [" t0", " t1", " t2"] and d["raw"] == ["Ġt0", "Ġt1", "Ġt2"]
    assert d["pad"] == [0, 0, 1]
    assert d["colour"] == [0, 255, None]
    assert d["bg"][0] == "rgb(255,245,235)" and d["bg"][255] == "rgb(217,72,1)"
    assert d["labels"] == ["KL (k3)", "log-prob"]
    assert d["values"] == [["0.0", "1.0", None], ["-1.235", "NaN", None]]


def test_token_view004_legend_gives_the_range():
    """A diverging legend shows lo, 0 and hi; a sequential one lo and hi."""
    signed = texts(legend("log-ratio", -2.5, 2.5, DIVERGING, True))
    assert signed == ["log-ratio", "-2.5", "0", "2.5"]
    assert texts(legend("KL (k3)", 0.0, 0.0123, ORANGES, False)) == ["KL (k3)", "0", "0.0123"]


def test_token_view016_legend_of_a_log_scale():
    """A scale that is not linear: each tick (in the metric's values) at its own place on the bar, the ends
    kept inside it, and a caption saying which scale with its note as hover text, before the clip's line."""
    ticks = [(0.0, 0.0, ""), (0.38, 0.1, ""), (1.0, 21.94, "≥ ")]
    got = legend("KL (k3)", 0.0, 21.94, ORANGES, False, (508.0, "why"), ticks, ("log scale", "how"))
    assert texts(got) == ["KL (k3)", "0", "0.1", "≥ 21.9", "log scale", "clipped at 21.9 (max 508)"]
    spans = [c for c in got.children[1].children[1].children]
    assert [(c.style["left"], c.style["transform"]) for c in spans] == [
        ("0.00%", "translateX(-0.00%)"),
        ("38.00%", "translateX(-38.00%)"),
        ("100.00%", "translateX(-100.00%)"),
    ]
    assert [c.title for c in got.children[2:]] == ["how", "why"]


def test_token_view005_position_figures():
    """Figures plot the given positions; each one round-trips through Plotly's validation."""
    df = tokens(
        3,
        logprob=[-1.0, -2.0, -0.5],
        ref_logprob=[-1.5, -2.0, -0.5],
        value=[0.5, 0.2, 0.1],
        **{"return": [1.0, 1.0, 1.0]},
        token_reward=[-0.1, 0.0, 1.1],
    ).filter(pl.col("pos") != 1)  # a hidden position leaves a gap, not a shift
    lp = logprob_figure(df, LABELS)
    assert [t.name for t in lp.data] == ["log-prob (policy)", "log-prob (reference)"]
    assert list(lp.data[0].x) == [0, 2] and list(lp.data[0].y) == [-1.0, -0.5]
    assert list(lp.data[0].customdata) == [" t0", " t2"]
    vf = value_figure(df, LABELS)
    assert [t.name for t in vf.data] == ["return (γ = 1)", "critic value"]
    tr = token_reward_figure(df, LABELS)
    assert tr.data[0].type == "bar" and list(tr.data[0].marker.color) == [0.0, 1.0]
    for fig in (lp, vf, tr):
        go.Figure(fig.to_dict())  # raises on any invalid property
        assert fig.layout.xaxis.title.text == "position" and fig.layout.xaxis.hoverformat == ",d"


def test_token_view006_empty_and_long_figures():
    """No values -> an explicit empty-state figure; beyond LONG_RESPONSE, lines without per-point labels."""
    empty = logprob_figure(tokens(2), LABELS)
    assert empty.data == () and "no log-probs" in empty.layout.annotations[0].text
    assert "no critic values" in value_figure(tokens(2), LABELS).layout.annotations[0].text
    assert "no token rewards" in token_reward_figure(tokens(0), LABELS).layout.annotations[0].text
    go.Figure(empty_figure("x").to_dict())
    n = LONG_RESPONSE + 1
    long = tokens(n, logprob=[-1.0] * n, token_reward=[0.0] * n)
    lp = logprob_figure(long, LABELS)
    assert lp.data[0].mode == "lines" and lp.data[0].customdata is None
    tr = token_reward_figure(long, LABELS)
    assert tr.data[0].type == "scatter" and tr.data[0].fill == "tozeroy"
    go.Figure(tr.to_dict())


def test_token_view011_fields_of_the_trainer_one_line_each():
    """The trainer's own per-token fields, given as (column, label): one line each in the file's order, a
    field without values here left out, a lone line named by the title; labels are escaped for Plotly."""
    df = tokens(3).with_columns(
        pl.Series("file:advantages", [0.5, -0.5, 1.0]),
        pl.Series("file:<b>x</b>", [None, None, None], dtype=pl.Float64),
        pl.Series("file:returns", [1.0, 1.0, 1.0]),
    )
    both = [("file:advantages", "advantages (from the file)"), ("file:returns", "returns (from the file)")]
    fig = file_fields_figure(df, [both[0], ("file:<b>x</b>", "<b>x</b> (from the file)"), both[1]])
    assert [t.name for t in fig.data] == [text for _, text in both]
    assert list(fig.data[0].y) == [0.5, -0.5, 1.0] and fig.data[0].line.color != fig.data[1].line.color
    one = file_fields_figure(df, [("file:<b>x</b>", "<b>x</b> (from the file)"), both[1]])
    assert one.layout.title.text == "returns (from the file)"
    lone = file_fields_figure(
        df.with_columns(pl.col("file:returns").alias("file:<b>y</b>")), [("file:<b>y</b>", "<b>y</b>")]
    )
    assert lone.layout.title.text == "&lt;b&gt;y&lt;/b&gt;"
    assert (
        "no per-token fields" in file_fields_figure(df, [("file:<b>x</b>", "x")]).layout.annotations[0].text
    )
    go.Figure(fig.to_dict())


def test_token_view007_hover_labels_escape_markup():
    """Plotly hover labels read a few HTML tags: token text is escaped so it shows literally."""
    df = pl.DataFrame({"text": ["<script>x</script>", "a & b", "<b>\n", None]})
    assert df.select(hover_safe_expr()).to_series().to_list() == [
        "&lt;script&gt;x&lt;/script&gt;",
        "a &amp; b",
        "&lt;b&gt;↵",
        "",
    ]


def test_token_view008_top_table_shows_tokens_as_text():
    """The top-k table renders one row per token, the raw token as plain text with a pad mark."""
    rows = pl.DataFrame(
        {
            "pos": [4, 1],
            "token": ["<img src=x onerror=alert(1)>", "<pad>"],
            "is_pad": [False, True],
            "logprob": [-1.0, None],
            "ref_logprob": [-2.0, None],
            "log_ratio": [1.0, None],
            "kl": [0.3679, None],
        }
    )
    table = top_table(rows, "Top tokens", LABELS, "t")
    strings = texts(table)
    assert "<img src=x onerror=alert(1)>" in strings and " pad" in strings
    assert "0.3679" in strings and "–" in strings
    assert len(table.children[1].children[1].children) == 2  # tbody rows


def test_token_view009_browser_code_writes_text_not_markup():
    """The strip and highlight scripts set textContent / title, never innerHTML."""
    for js in (STRIP_JS, HIGHLIGHT_JS):
        assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "eval(" not in js
    assert "textContent" in STRIP_JS
    assert "#my-strip[data-key=" in strip_js("my-strip") and "__STRIP__" not in strip_js("my-strip")
    assert "getElementById('my-strip')" in highlight_js("my-strip")
    assert json.dumps(STRIP_JS)  # a plain string Dash can ship


@pytest.mark.parametrize("metric", ["kl", "prob", "ref_prob", "value"])
def test_token_view010_sequential_and_diverging_stops(metric):
    """Each metric has its own scale: unsigned ones start at near-white, signed ones are diverging."""
    stops = colour_stops(metric, metric == "value")
    if metric == "value":
        assert stops is DIVERGING
    else:
        assert stops[0][0] == 0.0 and min(stops[0][1]) >= 235


def test_token_view012_strip_windows():
    """The strip's data is a window of STRIP_WINDOW rows from ``start`` (or up to a position asked), with
    the first row sent and the total; the windows together are the whole strip."""
    n = 2 * STRIP_WINDOW + 5
    df = tokens(n, kl=[float(i % 7) for i in range(n)]).filter(pl.col("pos") != 3)  # a hidden position
    first = orjson.loads(strip_data(df, "kl", 0.0, 6.0, ORANGES, "k", [("kl", "KL")])["json"])
    assert (first["start"], first["total"], len(first["pos"])) == (0, n - 1, STRIP_WINDOW)
    assert window_end(df, STRIP_WINDOW) == 2 * STRIP_WINDOW and window_end(df, 2 * STRIP_WINDOW) == n - 1
    assert window_end(df, 0, upto=2 * STRIP_WINDOW + 1) == 2 * STRIP_WINDOW + 1  # rows up to that position
    windows = [first]
    while windows[-1]["start"] + len(windows[-1]["pos"]) < n - 1:
        start = windows[-1]["start"] + len(windows[-1]["pos"])
        windows.append(
            orjson.loads(strip_data(df, "kl", 0.0, 6.0, ORANGES, "k", [("kl", "KL")], start)["json"])
        )
    assert [p for w in windows for p in w["pos"]] == df.get_column("pos").to_list()
    assert [c for w in windows for c in w["colour"]] == [round(v / 6 * 255) for v in df.get_column("kl")]


def test_token_view013_charts_keep_each_buckets_extremes():
    """A long response's chart has at most CHART_POINTS points: every bucket's lowest and highest value of
    each line, in position order, so a one-token spike stays; a short one keeps every point."""
    n = 20_000
    lp = [-1.0 - (i % 50) / 100 for i in range(n)]
    lp[12_345] = -30.0  # a spike
    df = tokens(n, logprob=lp, ref_logprob=[-1.0] * n)
    small = decimate(df, ["logprob", "ref_logprob"])
    assert small.height <= CHART_POINTS and small.get_column("pos").is_sorted()
    assert 12_345 in small.get_column("pos").to_list()
    assert small.get_column("logprob").max() == max(lp) and decimate(df.head(900), ["logprob"]).height == 900
    fig = logprob_figure(df, LABELS)
    assert len(fig.data[0].x) == small.height and -30.0 in list(fig.data[0].y)
    zoomed = logprob_figure(df.filter(pl.col("pos").is_between(12_000, 12_500)), LABELS, (12_100.0, 12_400.0))
    assert len(zoomed.data[0].x) == 501 and list(zoomed.layout.xaxis.range) == [12_100.0, 12_400.0]
    go.Figure(zoomed.to_dict())


def test_token_view014_relayout_range():
    """A chart's relayout events: a zoom or pan along x gives its range, a reset RESET, others None."""
    assert relayout_range({"xaxis.range[0]": 10, "xaxis.range[1]": 20.5}) == (10.0, 20.5)
    assert relayout_range({"xaxis.range": [1, 2], "yaxis.range": [0, 1]}) == (1.0, 2.0)
    assert relayout_range({"xaxis.autorange": True, "yaxis.autorange": True}) == RESET
    for other in (None, {}, {"autosize": True}, {"yaxis.range[0]": 1, "yaxis.range[1]": 2},
                  {"xaxis.range": ["a", 1]}, {"xaxis.range": [5, 5]}):  # fmt: skip
        assert relayout_range(other) is None


def test_token_view015_header_badge_says_how_the_response_ended():
    """The header's badge says "truncated" of a cut response, "ended" of one that ended, nothing when it
    cannot be told; the link to the response's group is there only when given."""
    from components.token_page import header

    def find(node, id_):
        if getattr(node, "id", None) == id_:
            return node
        for child in getattr(node, "children", None) or []:
            if not isinstance(child, str) and (hit := find(child, id_)) is not None:
                return hit
        return None

    cut = find(header("rank0.jsonl:3", "s-3", "run · step 1", "truncated"), "tokens-end")
    assert cut.children.startswith("truncated: no end token") and cut.color == "warning"
    assert find(header("a:1", "s", "w", "ended"), "tokens-end").children == "ended with an end token"
    assert find(header("a:1", "s", "w", None), "tokens-end") is None
    assert find(header("a:1", "s", "w"), "tokens-group") is None
    assert find(header("a:1", "s", "w", None, "/prompts?x"), "tokens-group").href == "/prompts?x"
