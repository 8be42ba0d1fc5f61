"""Issue 34's smaller truths through the app: a secret masked in the export and on the responses page, the
runs page's notes on masked fields and NeMo Gym's side files, and the prompts page counting the trainer's
groups (the lines built as in tests/unit/ingest/test_truths.py, which cites their writers)."""

from __future__ import annotations

import json

from tests.conftest import dash_post, page_url_key
from tests.unit.ingest.test_truths import _materialized_input, _tau2_line, _vf_line, _write

URL = page_url_key("/prompts")
CONTENT = "..prompts-content.children...prompts-notices.children...prompts-header.children...prompts-controls.style.."


def _root(tmp_path):
    root = tmp_path / "root"
    lines = [_tau2_line(task, rollout, float(rollout)) for task in (3, 4) for rollout in range(2)]
    _write(root / "tau2" / "rollouts.jsonl", lines)
    _write(root / "tau2" / "rollouts_materialized_inputs.jsonl", [_materialized_input(t, 0) for t in (3, 4)])
    prompt = [{"role": "system", "content": "Play wordle."}, {"role": "user", "content": "Guess the word."}]
    _write(
        root / "wordle" / "results.jsonl", [_vf_line(e, k, prompt, 1.0) for e in range(5) for k in range(3)]
    )
    return root


def _text(tree) -> str:
    return json.dumps(tree, ensure_ascii=False, default=lambda c: c.to_plotly_json())


def test_truths102_prompts_page_counts_the_trainers_groups(client, board_root, tmp_path):
    """wordle's one prompt text of 5 examples x 3 rollouts: the prompts page says 1 prompt and 5 groups
    (by group_id), its row 5 groups; tau2's prompts are listed by their question, none "(empty prompt)"."""
    board = board_root(_root(tmp_path), cache_dir=tmp_path / "cache")
    board.store("wordle", wait=60)
    board.store("tau2", wait=60)
    resp = dash_post(client, CONTENT, [{"id": URL, "property": "search", "value": "?run=wordle"}])
    shown = _text(resp["prompts-content"]["children"])
    assert "1 prompts" in shown and "5 groups (by group_id)" in shown
    resp = dash_post(client, CONTENT, [{"id": URL, "property": "search", "value": "?run=tau2"}])
    shown = _text(resp["prompts-content"]["children"])
    assert "(empty prompt)" not in shown
    for task in (3, 4):
        assert f"I need help urgently: I accidentally canceled order #{task}." in shown
