"""Builders of the prompts page (components/prompt_views.py): the reward chart, the responses grid and the
list table; model text stays text."""

from __future__ import annotations

import math


def test_prompts018_reward_figure():
    """One point per response carrying its sample id, per-step mean lines; empty input: empty state."""
    from components.prompt_views import clicked_sample, reward_chart_note, reward_figure

    labels = {"reward": "reward", "ref_reward": "reference reward"}
    fig = reward_figure(
        {"step": [1, 1, 2], "reward": [0.0, 1.0, 2.0], "sample_id": ["a-1", "a-2", "a-3"]},
        {
            "x": [1.0, 2.0],
            "first": [1, 2],
            "last": [1, 2],
            "n": [2, 1],
            "reward": [0.5, 2.0],
            "ref_reward": [None, 1.0],
        },
        labels,
    )
    assert [t.mode for t in fig.data] == ["markers", "lines+markers", "lines+markers"]
    assert [t.name for t in fig.data][:2] == ["reward (one response)", "reward (mean of the step)"]
    assert list(fig.data[0].customdata) == ["a-1", "a-2", "a-3"]
    assert math.isnan(fig.data[2].y[0])  # a step without reference reward is a gap
    assert list(fig.layout.xaxis.tickvals) == [1, 2]
    assert clicked_sample({"points": [{"customdata": "a-2"}]}) == "a-2"
    assert clicked_sample({"points": [{"x": 1}]}) is None and clicked_sample(None) is None
    assert reward_chart_note(3, 0) is None
    empty = reward_figure({"step": [], "reward": [], "sample_id": []}, {"x": [], "reward": []}, labels)
    assert empty.layout.annotations[0].text == "No response to this prompt"


def test_prompts025_reward_figure_of_bins():
    """Beyond the limit: each bin's highest and lowest response as points that open their token page, the
    bins' means as lines at their middle, and names and a note that say exactly what is drawn."""
    from components.prompt_views import clicked_sample, reward_chart_note, reward_figure

    labels = {"reward": "reward", "ref_reward": "reference reward"}
    points = {
        "step": [1, 5, 2, 5],
        "reward": [0.0, 4.0, 2.0, 4.0],
        "sample_id": ["a", "e", "b", "e"],
        "kind": ["lowest", "lowest", "highest", "highest"],
    }
    means = {
        "x": [2.0, 5.0],
        "first": [1, 4],
        "last": [3, 6],
        "n": [5, 1],
        "reward": [0.75, 4.0],
        "ref_reward": [None, None],
    }
    fig = reward_figure(points, means, labels, bin_steps=3)
    assert [t.name for t in fig.data] == [
        "reward (highest response of each 3 steps)",
        "reward (lowest response of each 3 steps)",
        "reward (mean of each 3 steps)",
    ]  # no reference reward: no reference line
    assert list(fig.data[0].customdata) == ["b", "e"] and list(fig.data[1].x) == [1.0, 5.0]
    assert fig.data[2].customdata.tolist() == [[1, 3, 5], [4, 6, 1]]  # steps and responses of each bin
    assert fig.data[2].hovertemplate.startswith("steps %{customdata[0]}–%{customdata[1]} · responses")
    assert clicked_sample({"points": [{"customdata": fig.data[1].customdata[0]}]}) == "a"
    assert reward_chart_note(1228, 3).startswith(
        "1,228 responses are too many to draw one by one: for each 3"
    )
    assert "for each step," in reward_chart_note(600, 1)
    one = reward_figure(points, means, labels, bin_steps=1)
    assert one.data[2].name == "reward (mean of the step)"


def test_prompts019_history_grid_links_and_flags():
    """The grid's rows link each sample id to its token page (markdown built from ids) and flag zero
    spread; model text stays plain text in its own column; the rows come from the server, sorted there."""
    from components.prompt_views import ZERO_SPREAD_TEXT, Column, history_grid, history_rows

    rows = [
        {
            "sample_id": "ab-1",
            "step": 1,
            "reward": 1.0,
            "zero_spread": True,
            "learning_signal": False,
            "response_preview": "<b>hi</b>",
        },
        {
            "sample_id": "ab-2",
            "step": 1,
            "reward": 1.0,
            "zero_spread": False,
            "learning_signal": True,
            "response_preview": "[x](y)",
        },
    ]
    cols = [
        Column("step", "step", "step"),
        Column("sample_id", "response", "text"),
        Column("learning_signal", "learning signal", "text"),
        Column("response_preview", "response (start)", "text"),
    ]
    data = history_rows(rows, cols, ["/tokens?run=r&sample=ab-1", "/tokens?run=r&sample=ab-2"], [None, None])
    assert (data[0]["sample_id"], data[0]["tokens_href"]) == ("ab-1", "/tokens?run=r&sample=ab-1")
    assert (data[0]["learning_signal"], data[1]["learning_signal"]) == (
        ZERO_SPREAD_TEXT,
        "yes: rewards differ",
    )
    assert data[1]["response_preview"] == "[x](y)" and "reward" not in data[1]  # only the grid's columns
    grid = history_grid(cols, 2, "g")
    assert grid.rowModelType == "infinite" and not getattr(grid, "rowData", None)
    assert grid.dashGridOptions["suppressMultiSort"] is True
    defs = {d.get("colId", d["field"]): d for d in grid.columnDefs}
    assert defs["sample_id"]["cellRenderer"] == "AppLink"  # the id as text, linking to tokens_href
    assert "cellRenderer" not in defs["response_preview"]  # model text is only ever text


def test_prompts020_list_table_headers_sort_links():
    """Sortable headers link to the URL sorted by them and mark the current sort; prompts are plain text."""
    from components.prompt_views import Column, prompt_list_table

    cols = [Column("prompt_preview", "prompt", "text"), Column("win_rate", "win rate", "share")]
    rows = [{"prompt_preview": "<script>x</script>", "win_rate": 0.25}]
    table = prompt_list_table(
        rows, cols, "win_rate", "desc", {"win_rate": "/p?sort=win_rate"}, ["/p?k"], {}, "t"
    )
    text = str(table.to_plotly_json())
    assert "win rate ▼" in text and "'/p?sort=win_rate'" in text
    assert "'<script>x</script>'" in text and "25%" in text
