"""What the runs page says of a run (data/runs_overview.py) and how its card reads (components/run_cards.py),
on hand-written runs."""

from __future__ import annotations

import json

import pytest

from components import run_cards
from data.compare.summary import summary_row
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.runs_overview import FIELDS_SHOWN, run_files_summary, run_headline, run_health
from data.store import open_store
from tests.conftest import FIXTURE_RUNS, fixture_or_demo


def _store(tmp_path, lines: list[str], name: str = "run"):
    run = tmp_path / "root" / name
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_text("".join(line + "\n" for line in lines))
    return run, open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)


def _text(component) -> str:
    out = []

    def walk(c):
        if isinstance(c, str | int):
            out.append(str(c))
        elif isinstance(c, list | tuple):
            for x in c:
                walk(x)
        elif c is not None and hasattr(c, "children"):
            walk(c.children)

    walk(component)
    return "".join(out)


def _by_id(component, id_):
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for c in children if isinstance(children, list) else [children]:
        if c is not None and not isinstance(c, str | int):
            found = _by_id(c, id_)
            if found is not None:
                return found
    return None


def test_runs_overview001_steps_below_zero(tmp_path):
    """A run whose steps are below zero shows their range without a dash that reads as a minus sign."""
    good = {"prompt": "p", "response": "r", "reward": 1.0}
    run, store = _store(tmp_path, [json.dumps({**good, "step": -s}) for s in (3, 2, 1)], "negative-steps")
    health = run_health(store)
    assert (health.samples, health.steps, health.step_span, health.bad_lines) == (3, 3, (-3, -1), 0)
    stats = run_cards.run_stats("negative-steps", run_files_summary(run), health)
    assert _text(_by_id(stats, "runs-steps-negative-steps")) == "3 (-3 to -1)"
    assert _text(_by_id(stats, "runs-samples-negative-steps")) == "3"
    assert _text(_by_id(stats, "runs-files-negative-steps")).startswith("1 (0.0 MB)")


def test_runs_overview002_fields_not_read_are_named(tmp_path):
    """A field that is neither a number, a text nor a list of numbers is named as not read; an object's
    fields are extra columns; more names than FIELDS_SHOWN are counted."""
    row = {"prompt": "p", "response": "r", "reward": 1.0, "step": 1, "tags": ["a"], "meta": {"src": "x"}}
    _, store = _store(tmp_path, [json.dumps(row)], "odd-fields")
    block = run_cards.fields_block("odd-fields", run_health(store).fields)
    assert (
        _text(_by_id(block, "runs-not-odd-fields"))
        == "not read: tags (not a number, a text or a list of numbers)"
    )
    assert _text(_by_id(block, "runs-extra-odd-fields")) == "extra columns: meta.src (in the responses table)"
    many = {**row, **{f"x{i:02d}": i for i in range(FIELDS_SHOWN + 3)}}
    _, store = _store(tmp_path, [json.dumps(many)], "many")
    extra = dict((k, names) for k, names, _ in run_health(store).fields)["extra columns"]
    assert extra.endswith(" and 4 more") and extra.count(", ") == FIELDS_SHOWN - 1
    assert run_cards.fields_block("none", []) is None


def test_runs_overview003_unusable_lines_and_notes(tmp_path):
    """Unusable lines are counted and listed with file, line and reason; a run without any lists none."""
    good = {"prompt": "p", "response": "r", "reward": 1.0, "step": 1}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "reward": "x"}), json.dumps(good)]
    _, store = _store(tmp_path, lines, "broken")
    health = run_health(store)
    assert health.bad_lines == 2 and health.n_errors == 2 and health.samples == 2
    assert [(e["source"], e["line"]) for e in health.errors] == [("rank0.jsonl", 2), ("rank0.jsonl", 3)]
    text = _text(run_cards.issues_block(health.errors, health.n_errors, health.notes, health.n_notes))
    assert text.startswith("2 unusable line(s)") and "invalid JSON" in text
    assert run_cards.issues_block([], 0, [], 0) is None
    more = run_cards.issues_block(health.errors[:1], 300, [("a note", 4, "f:1 ()")], 4)
    assert "300 unusable line(s) (first 1 shown)" in _text(more)
    assert "4 data-quality note(s): lines kept" in _text(more) and "a note: 4 line(s), e.g. f:1 ()" in _text(
        more
    )


def test_runs_overview004_sparkline_of_a_long_run_by_hand():
    """A run of at most SPARK_POINTS steps draws every step; a longer one, of every k steps the lowest and
    highest mean reward and the first gap, and the last step (k = ceil(n / (points // 2)))."""
    import math

    import numpy as np

    from data.runs_overview import spark_rows

    y = np.array([0.5, 0.1, 0.2, 0.9, math.nan, 0.3, 0.4, 0.4])
    assert spark_rows(y, points=8) == list(range(8))
    # k = 3: [0.5, 0.1, 0.2] -> 1 (low), 0 (high); [0.9, nan, 0.3] -> 5, 3, 4 (the gap);
    # [0.4, 0.4] -> 6 (the first of equal values); and the last row, 7
    assert spark_rows(y, points=6) == [0, 1, 3, 4, 5, 6, 7]
    # k = 4: [0.5, 0.1, 0.2, 0.9] -> 1, 3; [nan, 0.3, 0.4, 0.4] -> 5, 6, 4; last 7
    assert spark_rows(y, points=4) == [1, 3, 4, 5, 6, 7]
    y = np.arange(10.0)
    y[4] = 50.0  # a spike inside a run of 5 (k = 5) stays drawn
    assert spark_rows(y, points=4) == [0, 4, 5, 9]


def test_runs_overview005_health_is_read_once_per_commit(tmp_path, monkeypatch):
    """A run's health is worked out once per commit of its store: asked again it reads nothing; after a
    commit that brings a bad line and a step, it counts them."""
    from data.store.reader import RunStore

    good = {"prompt": "p", "response": "r", "reward": 1.0}
    run, store = _store(tmp_path, [json.dumps({**good, "step": s}) for s in (1, 2)])
    first = run_health(store)
    assert (first.samples, first.steps, first.bad_lines, first.n_errors) == (2, 2, 0, 0)
    with monkeypatch.context() as m:
        m.setattr(RunStore, "issues", lambda self: (_ for _ in ()).throw(AssertionError("issues read")))
        m.setattr(RunStore, "steps", lambda self: (_ for _ in ()).throw(AssertionError("steps read")))
        assert run_health(open_store(store.dir)) == first
    with open(run / "rank0.jsonl", "a") as f:
        f.write(json.dumps({**good, "step": 3}) + "\n{not json\n")
    again = run_health(open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir))
    assert (again.samples, again.steps, again.bad_lines, again.n_errors) == (3, 3, 1, 1)


@pytest.mark.parametrize("run", [*FIXTURE_RUNS, None])
def test_runs_overview006_card_columns_give_the_same_headline(tmp_path, fixtures_dir, run):
    """The few summary columns the runs page reads give the headline the whole summary gives, on the real
    fixtures and the demo run."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=30)
    store = open_store(ingest_run(src, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    h, row = run_headline(src.name, store), summary_row(src.name, store.steps())
    assert row["steps"] > 0
    got = (h.reward_last, h.reward_best, h.reward_best_step, h.kl_last)
    assert got == (row["reward_last"], row["reward_best"], row["reward_best_step"], row["kl_last"])
    health = run_health(store)
    assert (health.steps, health.samples) == (row["steps"], row["responses"])
