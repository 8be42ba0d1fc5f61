"""Builders of the responses table (components/tables.py): AG Grid column definitions, sort state, the text
panel and the summary line."""

from __future__ import annotations

import polars as pl
from dash import html

from components.tables import column_defs, column_kind, grid_sort, sort_state, summary_line, text_panel


def test_responses030_column_defs():
    """The file:line link column first (the stable id in its tooltip); step and reward pinned beside it;
    numbers right-aligned and formatted; the sorted column carries the sort; the previews wrapped on the
    run's lines and pinned on the right."""
    defs = column_defs(
        [("step", "step", ""), ("reward", "reward", ""), ("note", "note", "")],
        {"step": "int", "reward": "float", "note": "text"},
        {"reward"},
        [("prompt_preview", "prompt"), ("response_preview", "response")],
        "reward",
        "asc",
        ("step", "reward"),
        id_chars=20,
        lines=2,
    )
    assert [d.get("colId", d["field"]) for d in defs] == [
        "source_line",
        "step",
        "reward",
        "note",
        "prompt_preview",
        "response_preview",
    ]
    by = {d.get("colId", d["field"]): d for d in defs}
    assert by["source_line"]["cellRenderer"] == "AppLink" and by["source_line"]["tooltipField"] == "sample_id"
    assert by["source_line"]["cellRendererParams"] == {"hrefField": "tokens_href"}
    assert by["source_line"]["width"] == 160 and by["source_line"]["pinned"] == "left"
    assert by["reward"]["pinned"] == by["step"]["pinned"] == "left" and "pinned" not in by["note"]
    assert by["reward"]["sort"] == "asc" and "sort" not in by["step"]
    assert by["reward"]["type"] == "rightAligned" and ".4~g" in by["reward"]["valueFormatter"]["function"]
    assert "'d'" in by["step"]["valueFormatter"]["function"] and "type" not in by["note"]
    for preview in ("prompt_preview", "response_preview"):
        assert by[preview]["pinned"] == "right" and not by[preview]["sortable"] and by[preview]["wrapText"]
        assert by[preview]["cellClass"] == "rlb-preview rlb-lines-2"
        assert by[preview]["cellRenderer"] == "MarkedText"
        assert by[preview]["cellRendererParams"] == {"marksField": f"{preview}_marks"}
    assert column_kind(pl.Int64) == "int" and column_kind(pl.Float32) == "float"
    assert column_kind(pl.Boolean) == "bool" and column_kind(pl.String) == "text"


def test_responses031_grid_sort_and_state():
    """The sorted column is read from a columnState; a sort state sorts one column and clears the rest."""
    assert grid_sort([{"colId": "step", "sort": None}, {"colId": "kl_mean", "sort": "asc"}]) == (
        "kl_mean",
        "asc",
    )
    assert grid_sort([{"colId": "step"}]) is None and grid_sort(None) is None
    assert sort_state(["a", "b"], "b", "desc") == [
        {"colId": "a", "sort": None},
        {"colId": "b", "sort": "desc"},
    ]


def _texts(component) -> list:
    out = []
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None:
            out += _texts(child)
    return out


def test_responses032_text_panel_is_plain_text():
    """Texts go into <pre> blocks as plain strings (HTML-looking text stays text), the search's matches
    as <mark> elements holding plain strings, with file:line and the rewards; nothing without a row."""
    from data.queries import match_pieces

    texts = {"prompt": "say <b>hi</b>\nplease", "response": "<script>alert(1)</script>", "ref_response": None}
    sample = {
        "sample_id": "ab-1",
        "source_line": "rank0.jsonl:7",
        "step": 3,
        **texts,
        "pieces": {
            k: match_pieces(t, "<b>|alert" if k != "ref_response" else None) for k, t in texts.items()
        },
        "reward": 1.5,
        "ref_reward": 2.0,
        "reward_gain": -0.5,
    }
    labels = {"reward": "reward", "ref_reward": "reference reward", "reward_gain": "reward gain"}
    panel = text_panel(sample, labels, "/tokens?run=r&sample=ab-1", "marked: '<b>|alert'")
    pres = [c for c in _walk(panel) if isinstance(c, html.Pre)]
    assert [[c if isinstance(c, str) else ("mark", c.children) for c in p.children] for p in pres] == [
        ["say ", ("mark", "<b>"), "hi</b>\nplease"],
        ["<script>", ("mark", "alert"), "(1)</script>"],
    ]
    marks = [c for c in _walk(panel) if isinstance(c, html.Mark)]
    assert all(isinstance(m.children, str) for m in marks) and len(marks) == 2
    shown = " ".join(_texts(panel))
    assert "reward 1.5" in shown and "reference reward 2" in shown and "(none in the file)" in shown
    assert "rank0.jsonl:7" in shown and "marked: '<b>|alert'" in shown
    assert text_panel(None, labels, None) is None


def _walk(component):
    yield component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            yield from _walk(child)


def test_responses033_summary_line():
    """'N matching of M responses at step S · mean reward of the matches X'."""
    line = " ".join(_texts(summary_line(3, 16, "at step 3", 1.25, "reward")))
    assert line == "3  matching of 16 responses at step 3  ·  mean reward of the matches  1.25"
    assert (
        " ".join(_texts(summary_line(0, 16, "at step 3", None, "reward")))
        == "0  matching of 16 responses at step 3"
    )


def test_responses036_sorted_state_only_when_needed():
    """The grid is told its sort only when it shows another one (and has columns to sort)."""
    from components.tables import sorted_state

    state = [{"colId": "step", "sort": None}, {"colId": "reward", "sort": "desc"}]
    assert sorted_state(state, "reward", "desc") is None and sorted_state(None, "reward", "desc") is None
    assert sorted_state(state, "step", "asc") == [
        {"colId": "step", "sort": "asc"},
        {"colId": "reward", "sort": None},
    ]
