"""What a shared server refuses, on real gunicorn as the image runs it: request bodies over the limit (413,
never read into a worker)."""

from __future__ import annotations

import http.client
import time

import psutil
import pytest
import requests

import routes
from tests.conftest import router_body
from tests.integration.test_gunicorn import GunicornServer
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(contract_root, tmp_path_factory):
    with GunicornServer(contract_root, tmp_path_factory.mktemp("limits-cache")) as srv:
        yield srv


def _post_raw(srv, path: str, size: int) -> tuple[int | None, bytes]:
    """POST ``size`` bytes (Content-Length set), sending until the server stops reading; its answer."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(size))
    conn.endheaders()
    chunk, sent = b"x" * (1 << 20), 0
    try:
        while sent < size:
            conn.send(chunk[: size - sent])
            sent += len(chunk)
    except OSError:
        pass  # the server answered and closed without reading the rest: what the limit is for
    try:
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_limits101_big_body_is_413_and_never_read(server):
    """A 200 MB callback body answers 413 at once and adds nothing to the workers' memory (it added 385 MB
    before); a body just over the limit is 413 too, and a real callback still answers."""
    workers = psutil.Process(server.proc.pid).children()
    before = {w.pid: w.memory_info().rss for w in workers}
    t0 = time.monotonic()
    status, body = _post_raw(server, "/_dash-update-component", 200 << 20)
    assert status == 413 and b"too large" in body, (status, body[:200])
    assert time.monotonic() - t0 < 10
    grown = max(w.memory_info().rss - before[w.pid] for w in workers)
    assert grown < 20 << 20, grown
    status, _ = _post_raw(server, "/_dash-update-component", routes.MAX_BODY_BYTES + 1)
    assert status == 413
    r = requests.post(server.base + "/_dash-update-component", json=router_body("/reward", ""), timeout=60)
    assert r.status_code == 200


GRID_ROWS = {
    "output": "responses-grid.getRowsResponse",
    "outputs": {"id": "responses-grid", "property": "getRowsResponse"},
    "inputs": [
        {"id": "responses-grid", "property": "getRowsRequest", "value": {"startRow": 0, "endRow": 10}}
    ],
    "state": [{"id": "responses-view", "property": "data", "value": "?run=trl-ppo-small"}],
    "changedPropIds": ["responses-grid.getRowsRequest"],
}
MALFORMED = {
    "a list": [1, 2],
    "empty object": {},
    "unknown output": {
        **GRID_ROWS,
        "output": "nope.children",
        "outputs": {"id": "nope", "property": "children"},
    },
    "output not a string": {**GRID_ROWS, "output": 5},
    "no outputs": {k: v for k, v in GRID_ROWS.items() if k != "outputs"},
    "inputs null": {**GRID_ROWS, "inputs": None},
    "inputs missing": {**GRID_ROWS, "inputs": []},
    "input of another id": {**GRID_ROWS, "inputs": [{"id": "reward-url", "property": "search", "value": ""}]},
    "state missing": {**GRID_ROWS, "state": []},
    "changedPropIds null": {**GRID_ROWS, "changedPropIds": None},
    # Right shape, values the renderer never sends: the callback itself fails on them.
    "value a string": {**GRID_ROWS, "inputs": [{**GRID_ROWS["inputs"][0], "value": "x"}]},
    "value without keys": {**GRID_ROWS, "inputs": [{**GRID_ROWS["inputs"][0], "value": {"a": 1}}]},
    "state a number": {**GRID_ROWS, "state": [{**GRID_ROWS["state"][0], "value": 5}]},
}


def test_limits102_malformed_callbacks_are_400_with_one_log_line(server):
    """Each malformed callback POST, three times, answers 400 with a one-line reason (was 500); the log gets
    one line per request and no traceback; the well-formed request still answers 200."""
    before = server.log.read_text(errors="replace")
    for name, body in MALFORMED.items():
        for _ in range(3):
            r = requests.post(server.base + "/_dash-update-component", json=body, timeout=60)
            assert r.status_code == 400, (name, r.status_code, r.text[:200])
            assert r.headers["Content-Type"].startswith("text/plain") and r.text.count("\n") == 1, name
            assert "Traceback" not in r.text and ".py" not in r.text, name
    r = requests.post(server.base + "/_dash-update-component", json=GRID_ROWS, timeout=60)
    assert r.status_code == 200 and r.json()["response"]["responses-grid"]["getRowsResponse"]["rowCount"] > 0
    want = 3 * len(MALFORMED)
    wait_until(  # the workers log each request after answering it
        lambda: server.log.read_text(errors="replace")[len(before) :].count("bad callback request") >= want,
        60,
        lambda: f"{want} 'bad callback request' log lines:\n{server.log_tail()}",
    )
    log = server.log.read_text(errors="replace")[len(before) :]
    assert "Traceback" not in log, log[:3000]
    assert log.count("bad callback request") == 3 * len(MALFORMED), log[-3000:]
