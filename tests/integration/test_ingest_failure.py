"""A run whose ingest fails (a cache that cannot be written): it is tried again with a growing delay, not on
every request, and every page of that run says why it is not shown."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from data.store.table import MANIFESTS
from tests.conftest import dash_post, page_url_key, router_body
from tests.waiting import wait_until

URL = page_url_key("/prompts")  # the page's own dcc.Location

RUN = "failing-run"


def _root(tmp_path: Path) -> Path:
    run = tmp_path / "root" / RUN
    run.mkdir(parents=True)
    rows = [{"prompt": f"p{i}", "response": "r", "reward": i / 4, "step": i // 2} for i in range(8)]
    (run / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run.parent


def _block_store(board, run: str) -> Path:
    """Make every ingest of ``run`` fail as on a full or read-only volume, while reading still works: its
    store's ``parts`` folder is a file (the tests run as root, whom permissions do not stop). Returns it."""
    blocker = board.store_dir(run) / "parts"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("the disk is full")
    return blocker


def _wait_idle(board, run: str) -> None:
    wait_until(lambda: not board.status(run).running, 120, f"the ingest of {run} to end", interval=0.01)


def test_backoff001_a_failing_ingest_is_retried_with_a_growing_delay(tmp_path, board_root):
    """Requests for a run whose ingest fails do not start it again until its delay has passed (before, every
    page poll read the whole run again); the delay doubles; the error stays shown while waiting, and the
    first ingest that succeeds clears it."""
    b = board_root(_root(tmp_path), cache_dir=tmp_path / "cache")
    blocker = _block_store(b, RUN)
    for _ in range(10):
        assert b.store(RUN, wait=0.2) is None
        _wait_idle(b, RUN)
    status = b.status(RUN)
    assert status.failures == 1
    assert status.error is not None and "FileExistsError" in status.error
    assert 0 < b.retry_in(RUN) <= 1.0
    wait_until(lambda: b.retry_in(RUN) == 0, 30, "the first retry delay to pass")
    assert b.failure_notices(RUN)[0].endswith("FileExistsError: [Errno 17] File exists: "
                                              f"'{blocker}'. Trying again now."), b.failure_notices(RUN)  # fmt: skip
    assert b.store(RUN, wait=0.2) is None
    _wait_idle(b, RUN)
    assert status.failures == 2 and status.error is not None
    assert 1.0 < b.retry_in(RUN) <= 2.0  # twice the first delay
    assert re.search(r"\. Tried again in [12] s\.$", b.failure_notices(RUN)[0]), b.failure_notices(RUN)
    b.store(RUN, wait=0.2)
    assert status.failures == 2  # still waiting
    blocker.unlink()  # the volume is writable again
    wait_until(lambda: b.retry_in(RUN) == 0, 30, "the second retry delay to pass")
    store = b.store(RUN, wait=60)
    assert store is not None and store.steps().height == 4
    assert status.error is None and status.failures == 0
    assert b.failure_notices(RUN) == []


def _page_text(client, path: str) -> str:
    r = client.post("/_dash-update-component", json=router_body(path, f"?run={RUN}"))
    assert r.status_code == 200
    return r.get_data(as_text=True)


PAGES = ["/", "/reward", "/responses", "/tokens", "/prompts"]


@pytest.mark.parametrize("path", PAGES)
def test_backoff002_every_page_of_the_run_shows_the_error(tmp_path, board_root, client, path):
    """Every page of a run whose ingest failed says so and why (before, only the runs page did; the others
    said "Reading run… reload" for ever)."""
    b = board_root(_root(tmp_path), cache_dir=tmp_path / "cache")
    _block_store(b, RUN)
    b.store(RUN, wait=5)
    _wait_idle(b, RUN)
    if path == "/prompts":
        out = dash_post(
            client,
            "..prompts-content.children...prompts-notices.children...prompts-header.children...prompts-controls.style..",
            [{"id": URL, "property": "search", "value": f"?run={RUN}"}],
        )
        text = json.dumps(out)
    else:
        text = _page_text(client, path)
    assert "FileExistsError" in text
    if path != "/":
        assert re.search(rf"Reading run {RUN} failed \(\d+ times? in a row\)", text)
        assert "reload the page in a moment" not in text


@pytest.mark.parametrize("path", ["/reward", "/responses", "/tokens"])
def test_backoff003_a_failing_refresh_is_shown_beside_what_was_read_before(
    tmp_path, board_root, client, path
):
    """A run read before whose next ingest fails (the cache filled up) keeps showing what was committed,
    with the error beside it."""
    root = _root(tmp_path)
    b = board_root(root, cache_dir=tmp_path / "cache")
    assert b.store(RUN, wait=60) is not None
    store_dir = b.store_dir(RUN)
    _wait_idle(b, RUN)
    with open(root / RUN / "rank0.jsonl", "a") as f:
        f.write(json.dumps({"prompt": "p", "response": "r", "reward": 1, "step": 9}) + "\n")
    # The next commit fails (a file where its manifest's folder goes), reading the committed ones still works.
    shutil.rmtree(store_dir / MANIFESTS)
    (store_dir / MANIFESTS).write_bytes(b"")
    b.refresh(RUN, force=True)
    _wait_idle(b, RUN)
    assert b.status(RUN).error is not None
    text = _page_text(client, path)
    assert re.search(rf"Reading run {RUN} failed \(\d+ times? in a row\)", text)
    shown = {"/reward": '"reward-step"', "/responses": '"responses-grid"', "/tokens": '"tokens-stats"'}
    assert shown[path] in text  # the page of what was committed, not a progress bar


def test_backoff004_compare_names_the_failing_run_once(tmp_path, board_root):
    """Compare puts each run's name before its pages' notices; one that names the run already (a failed
    read) is not prefixed again (before: "failing-run: Reading run failing-run failed ...")."""
    from data.compare.runs import load_runs

    root = _root(tmp_path)
    b = board_root(root, cache_dir=tmp_path / "cache")
    assert b.store(RUN, wait=60) is not None
    _wait_idle(b, RUN)
    with open(root / RUN / "rank0.jsonl", "a") as f:
        f.write(json.dumps({"prompt": "p", "response": "r", "reward": 1, "step": 9}) + "\n")
    shutil.rmtree(b.store_dir(RUN) / MANIFESTS)
    (b.store_dir(RUN) / MANIFESTS).write_bytes(b"")
    b.refresh(RUN, force=True)
    _wait_idle(b, RUN)
    runs, notes = load_runs(b, [RUN])
    assert [r.name for r in runs] == [RUN]  # what was committed, compared
    texts = [n.text for n in notes]
    assert len(texts) == 1 and texts[0].startswith(f"Reading run {RUN} failed ("), texts
