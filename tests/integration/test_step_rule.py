"""One step rule on every page (issue 32): a run whose steps are 1, 2, 5, 9 opened at step=4 shows step 2 on
the reward page, the responses page, in the navbar's links and in /export, with the same notice; so does
the command line's export."""

from __future__ import annotations

import csv
import io
import json
import sys

import pytest

from tests.conftest import dash_post, find
from tests.integration.test_cli import run_cli

RUN = "gaps"
STEPS = (1, 2, 5, 9)
PER_STEP = 3
NOTICE = f"Run {RUN} has no step 4: showing step 2, the nearest step before it."
FIRST_NOTICE = f"Run {RUN} has no step 0: showing step 1, its first step."


def write_gaps_run(root, name=RUN):
    """A contract run ``name`` under ``root``: PER_STEP responses at each of the steps 1, 2, 5 and 9; a
    response's reward is its step (so a row tells its step by its reward too)."""
    run = root / name
    run.mkdir(parents=True)
    lines = [
        {"prompt": f"p{step}-{i}", "response": f"r{step}-{i}", "reward": float(step), "step": step}
        for step in STEPS
        for i in range(PER_STEP)
    ]
    (run / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


@pytest.fixture
def gaps(board_root, tmp_path):
    """The app's board pointed at a root holding only the ``gaps`` run."""
    write_gaps_run(tmp_path / "root")
    return board_root(tmp_path / "root", cache_dir=tmp_path / "cache")


def _texts(component) -> list[str]:
    return [a.children for a in (component.children or [])]


def test_steprule001_reward_page(dash_app, gaps):
    """The reward page at step=4 selects step 2 (slider, step text, the selected step) with the notice."""
    page = sys.modules["pages.reward"]
    root = page.layout(run=RUN, step="4")
    assert find(root, "reward-selected").data == 2
    assert find(root, "reward-step-text").children == "step 2 · 2 of 4"
    assert _texts(find(root, "reward-notices")) == [NOTICE]
    root = page.layout(run=RUN, step="0")
    assert find(root, "reward-selected").data == 1 and _texts(find(root, "reward-notices")) == [FIRST_NOTICE]


def test_steprule008_tokens_page(gaps):
    """The token page at step=4, no response named, shows step 2's largest-KL response with the same notice,
    and carries step 2 (not the 4 asked for) as the other pages do."""
    from data.token_page import token_page
    from data.views.tokens import TokensState

    state, notes = TokensState.from_query({"run": [RUN], "step": ["4"]})
    page = token_page(state, notes, gaps, wait=10.0)
    assert page.view is not None and page.view.info["step"] == 2
    assert NOTICE in page.notices and page.state.step == 2
    state, notes = TokensState.from_query({"run": [RUN], "step": ["5"]})
    page = token_page(state, notes, gaps, wait=10.0)
    assert page.view.info["step"] == 5 and page.state.step == 5
    assert not any("has no step" in n for n in page.notices)


def test_steprule002_responses_page(dash_app, client, gaps):
    """The responses page at step=4 picks step 2, says so, and its grid holds step 2's rows only."""
    page = sys.modules["pages.responses"]
    lay = page.layout(run=RUN, step="4")
    assert find(lay, "responses-step").value == 2
    assert _texts(find(lay, "responses-notices")) == [NOTICE]
    assert find(lay, "responses-view").data == f"?run={RUN}&step=2"
    request = {"startRow": 0, "endRow": 100, "sortModel": []}
    rows = dash_post(
        client,
        "responses-grid.getRowsResponse",
        [{"id": "responses-grid", "property": "getRowsRequest", "value": request}],
        [{"id": "responses-view", "property": "data", "value": f"?run={RUN}&step=4"}],
    )["responses-grid"]["getRowsResponse"]
    assert rows["rowCount"] == PER_STEP and {r["step"] for r in rows["rowData"]} == {2}
    assert (
        find(page.layout(run=RUN, step="all"), "responses-view").data == f"?run={RUN}&step=all"
    )  # as it was


SHELL_OUT = (
    "..app-run.value...app-run-shown.data...app-nav-runs.href...app-nav-reward.href...app-nav-scatter.href...app-nav-responses.href"
    "...app-nav-tokens.href...app-nav-drift.href...app-nav-prompts.href...app-nav-compare.href...app-nav-gap.href.."
)


@pytest.mark.parametrize("path", ["/reward", "/scatter", "/responses"])
def test_steprule003_navbar_carries_the_step_shown(client, gaps, path):
    """The navbar's links from a page at step=4 carry step 2, the step the page shows (the token page's
    too)."""
    page = [
        {"id": {"type": "app-page-url", "path": path}, "property": "search", "value": f"?run={RUN}&step=4"}
    ]
    inputs = [
        {"id": "app-location", "property": "pathname", "value": path},
        {"id": "app-location", "property": "search", "value": f"?run={RUN}&step=4"},
        page,
    ]
    resp = dash_post(client, SHELL_OUT, inputs)
    assert resp["app-nav-reward"]["href"] == f"/reward?run={RUN}&step=2"
    assert resp["app-nav-responses"]["href"] == f"/responses?run={RUN}&step=2"
    assert resp["app-nav-tokens"]["href"] == f"/tokens?run={RUN}&step=2"  # that step's largest-KL response
    assert resp["app-nav-scatter"]["href"] == f"/scatter?run={RUN}&step=2"


def test_steprule004_export(client, gaps):
    """/export at step=4 answers step 2's rows with 200, the notice in X-RLBoard-Notice and in no line."""
    r = client.get(f"/export?run={RUN}&step=4&format=csv")
    assert r.status_code == 200, r.data[:300]
    assert r.headers["X-RLBoard-Notice"] == NOTICE
    assert r.headers["Content-Disposition"] == f'attachment; filename="{RUN}-step2.csv"'
    text = r.data.decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == PER_STEP and {r["step"] for r in rows} == {"2"} and "no step" not in text
    r = client.get(f"/export?run={RUN}&step=2&format=jsonl")
    assert r.status_code == 200 and "X-RLBoard-Notice" not in r.headers
    assert {json.loads(x)["step"] for x in r.data.decode().splitlines()} == {2}


def test_steprule007_compare_at(dash_app, board_root, tmp_path):
    """Compare's at=gaps:4 sets the run's step picker to step 2 and draws step 2's distribution, with the
    notice."""
    from data.compare import distribution
    from data.service import board

    write_gaps_run(tmp_path / "root")
    write_gaps_run(tmp_path / "root", "twin")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    root = sys.modules["pages.compare"].layout(run=[RUN, "twin"], at=[f"{RUN}:4"])
    assert find(root, {"type": "compare-at", "run": RUN}).value == 2
    assert find(root, {"type": "compare-at", "run": "twin"}).value is None
    stores = {RUN: board().store(RUN), "twin": board().store("twin")}
    bars, notes = distribution.distributions(stores, {RUN: 4}, distribution.shared_bins(stores))
    assert [(b.run, b.step) for b in bars] == [(RUN, 2), ("twin", 9)]
    assert [n.text for n in notes] == [NOTICE]


def test_steprule005_export_notice_header_is_safe():
    """A run name's non-ASCII characters and line breaks are percent-encoded in the header, never sent raw."""
    from data.export import header_text

    assert header_text("Run a has no step 4") == "Run a has no step 4"
    assert header_text("Run é\r\nX: y 100%") == "Run %C3%A9%0D%0AX: y 100%25"


def test_steprule006_cli_export(tmp_path):
    """`export --step 4` writes step 2's rows and prints the notice on stderr."""
    write_gaps_run(tmp_path / "root")
    out = tmp_path / "out.csv"
    p = run_cli("export", str(tmp_path / "root"), "--run", RUN, "--step", "4", "-o", str(out), cache=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines() == [NOTICE]
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == PER_STEP and {r["step"] for r in rows} == {"2"}
