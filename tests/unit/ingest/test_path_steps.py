"""Where a step comes from when a line has none (a path read only in a trainer's known layout, else step 0
said on every page), and when a dialect's match is sure (only on what is unique to it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.ingest import ingest_run
from data.schema.dialects import detect, step_from_path
from data.store import open_store
from data.store.reading import page_notices, understood


def test_pathsteps001_known_layouts_only():
    """ "step" and a number in the file's name, a parent folder that is only a number (AReaL's version
    folder: the file's own number is a task id), "step" and a number in a folder, a bare-number file in a
    folder that is not (veRL's flat {step}.jsonl); nothing else gives a step."""
    given = {
        "train_data_step3.jsonl": 3,
        "step_12/rank0.jsonl": 12,
        "rollouts/step_12/train_rollouts.jsonl": 12,
        "120.jsonl": 120,
        "dumps/120.jsonl": 120,
        "rollout/0/13.jsonl": 0,  # AReaL: version 0, task 13
        "rollout/7/13.jsonl": 7,
        "eval-rollout/4/1.jsonl": 4,
        "step_3/rollout/0/13.jsonl": 0,  # the innermost layout: the version folder
        "rollouts/step_2/7.jsonl": 2,  # a file numbered inside a step folder: the folder's step
        "7/step_2.jsonl": 2,  # the file's own "step" first
        "rank0.jsonl": None,
        "data/rank0.jsonl": None,
        "run-2024/results.jsonl": None,
        "substep3/a.jsonl": None,
        "99999999999999999999.jsonl": None,
    }
    assert {rel: step_from_path(rel) for rel in given} == given


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"prompt", "completion", "reward"}, ("verifiers", "guessed")),  # names any logger uses
        ({"prompt", "completion", "reward", "example_id"}, ("verifiers", "sure")),
        ({"prompt", "response", "reward", "step"}, ("contract", "sure")),  # the contract's own names
        ({"query", "response", "score"}, ("contract", "guessed")),
        ({"text", "label"}, ("contract", "guessed")),
        ({"responses_create_params", "response", "reward"}, ("nemo_gym", "sure")),
    ],
)
def test_pathsteps002_sure_only_on_what_is_unique(fields, want):
    """A dialect is sure only on fields unique to it; shared names (prompt + completion) are a guess."""
    m = detect("rank0.jsonl", frozenset(fields))
    assert (m.dialect.name, m.how) == want


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_pathsteps003_no_step_anywhere_is_step_zero_said(tmp_path):
    """Lines with no step in a file whose path is no known layout load as step 0 (before: every line bad),
    and every page says so; a file whose lines carry their steps says nothing of the kind; a file read by
    a guess says so on every page."""
    run = tmp_path / "root" / "run"
    _write(
        run / "dump" / "rank0.jsonl", [{"prompt": f"p{i}", "response": "r", "reward": i} for i in range(3)]
    )
    _write(run / "logs" / "rank1.jsonl", [{"prompt": "q", "response": "r", "reward": 1.0, "step": 4}])
    res = ingest_run(run, tmp_path / "cache", ())
    store = open_store(res.store_dir)
    assert res.bad_lines == 0
    steps = {(r["source"], r["step"]) for r in store.scalars().iter_rows(named=True)}
    assert steps == {("dump/rank0.jsonl", 0), ("logs/rank1.jsonl", 4)}
    files = store.manifest.files
    assert (files["dump/rank0.jsonl"]["step"], files["dump/rank0.jsonl"]["step_from"]) == (0, "none")
    assert files["logs/rank1.jsonl"]["step_from"] is None
    notices = page_notices(store)
    assert notices == [
        "No step in dump/rank0.jsonl (not in its lines, nor in a known layout of its path): its responses "
        "are shown as step 0."
    ]
    assert any("No step in 1 file (e.g. dump/rank0.jsonl)" in n for n in understood(store).notes)

    guess = tmp_path / "root" / "guess"
    _write(guess / "out.jsonl", [{"prompt": "p", "completion": "c", "reward": 1.0, "step": 1}])
    g = open_store(ingest_run(guess, tmp_path / "cache", ()).store_dir)
    assert g.manifest.files["out.jsonl"]["matched"] == "guessed"
    assert any("read as verifiers / prime-rl results by a guess" in n for n in page_notices(g))
