"""Issue 34's smaller truths through the app: a secret masked in the export and on the responses page, the
runs page's notes on masked fields and NeMo Gym's side files, and the prompts page counting the trainer's
groups (the lines built as in tests/unit/ingest/test_truths.py, which cites their writers)."""

from __future__ import annotations

import json
import sys

from tests.conftest import dash_post, page_url_key
from tests.unit.ingest.test_truths import _materialized_input, _tau2_line, _vf_line, _write

URL = page_url_key("/prompts")
CONTENT = "..prompts-content.children...prompts-notices.children...prompts-header.children...prompts-controls.style.."
KEY = "sk-tau2-agent-key-0001"  # _tau2_line's config.llm_args_agent.api_key


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


def test_truths101_secret_masked_in_export_and_pages(client, board_root, tmp_path):
    """tau2's ``config.llm_args_agent.api_key``: ``[masked]`` in the export (JSON lines and CSV) and in the
    responses page's rows, its value nowhere; the runs page says the fields were masked and that NeMo
    Gym's materialized inputs were not read as rollouts."""
    from data.schema.secrets import MASK

    board = board_root(_root(tmp_path), cache_dir=tmp_path / "cache")
    board.store("tau2", wait=60)
    r = client.get("/export?run=tau2&step=all&format=jsonl")
    assert r.status_code == 200, r.data[:300]
    rows = [json.loads(x) for x in r.data.decode("utf-8").splitlines()]
    assert len(rows) == 4 and {x["config.llm_args_agent.api_key"] for x in rows} == {MASK}
    assert KEY not in r.data.decode("utf-8") and "dummy api key" not in r.data.decode("utf-8")
    r = client.get("/export?run=tau2&step=all&format=csv")
    assert r.status_code == 200 and MASK in r.data.decode("utf-8") and KEY not in r.data.decode("utf-8")
    resp = dash_post(
        client,
        "responses-grid.getRowsResponse",
        [{"id": "responses-grid", "property": "getRowsRequest", "value": {"startRow": 0, "endRow": 100}}],
        [{"id": "responses-view", "property": "data", "value": "?run=tau2&step=0"}],
    )
    got = resp["responses-grid"]["getRowsResponse"]["rowData"]
    assert len(got) == 4 and {x["config.llm_args_agent.api_key"] for x in got} == {MASK}
    assert KEY not in _text(got)
    page = sys.modules["pages.runs"].runs_overview()
    shown = _text(page)
    assert (
        f"2 fields masked as {MASK} (config.llm_args_agent.api_key, config.llm_args_user.api_key):" in shown
    )
    assert "Not read as rollouts: rollouts_materialized_inputs.jsonl (NeMo Gym" in shown
    assert KEY not in shown


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
