"""The real server (gunicorn with gunicorn.conf.py, as the image runs it) as a user who may not read all of
the rollout root, as the container's uid 10001 before a trainer's folder of mode 0700: /healthz answers
200 throughout, nothing raises into the log, the runs page says what is wrong and what to do, and the
runs it can read serve every page."""

from __future__ import annotations

import csv
import io
import threading
import time

import pytest
import requests

from tests.conftest import router_body
from tests.integration.test_gunicorn import PAGES, GunicornServer
from tests.unprivileged import (
    AS_ROOT,
    NOBODY,
    make_unreadable,
    open_folder,
    readable_copy,
    remove,
    require_unprivileged_python,
)
from tests.waiting import wait_until

RUN = "trl-ppo-small"
OTHER = "rlloggingboard-eval-poem"
CLOSED = "trl-grpo-small"
UID = NOBODY if AS_ROOT else None


class HealthWatch:
    """Polls /healthz every 0.25 s in a thread for as long as the server is tested; records every answer
    that is not 200 (or no answer)."""

    def __init__(self, base: str):
        self.base, self.bad, self.seen = base, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.25):
            try:
                # A loaded machine answers late: only no answer (in a minute) is bad.
                r = requests.get(self.base + "/healthz", timeout=60)
                self.seen.append(r.json().get("root") if r.status_code == 200 else None)
                if r.status_code != 200:
                    self.bad.append((r.status_code, r.text[:200]))
            except requests.RequestException as e:
                self.bad.append(("no answer", str(e)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)


def _texts(node) -> str:
    """Every string in a JSON answer (a rendered layout), one a line."""
    if isinstance(node, str):
        return node + "\n"
    if isinstance(node, dict):
        return "".join(_texts(v) for v in node.values())
    if isinstance(node, list):
        return "".join(_texts(v) for v in node)
    return ""


def _render(srv: GunicornServer, path: str, search: str = "") -> str:
    r = requests.post(srv.base + "/_dash-update-component", json=router_body(path, search), timeout=60)
    assert r.status_code == 200, (path, r.status_code, r.text[:300])
    text = _texts(r.json())
    assert "404 - Page not found" not in text and "Traceback" not in text, path
    return text


def _assert_clean_log(srv: GunicornServer) -> None:
    log = srv.log.read_text(errors="replace")
    assert "Traceback" not in log and "[ERROR]" not in log, srv.log_tail(60)


@pytest.fixture(scope="module")
def closed_root_server():
    """gunicorn as an unprivileged user on a rollout root (holding a run) that it may not read."""
    require_unprivileged_python()
    root, cache = open_folder(), open_folder(writable=True)
    (root / RUN).mkdir()
    (root / RUN / "rank0.jsonl").write_text("")
    make_unreadable(root)
    srv = GunicornServer(root, cache, unprivileged=True)
    try:
        with srv, HealthWatch(srv.base) as watch:
            yield srv, watch, root
    finally:
        remove(root)
        remove(cache)


def test_unreadable001_root_closed(closed_root_server):
    """/healthz is 200 and says the root is unreadable; the runs page says so, whose folder it is, who the
    board runs as and the three fixes; every other page points to the runs page; no traceback is logged."""
    srv, watch, root = closed_root_server
    health = requests.get(srv.base + "/healthz", timeout=60)
    assert health.status_code == 200
    assert health.json() | {"version": None} == {
        "status": "ok",
        "version": None,
        "runs": 0,
        "root": "unreadable: permission denied",
        "unreadable": {},
    }
    for path in PAGES:
        assert requests.get(srv.base + path, timeout=30).status_code == 200, path
    runs_page = _render(srv, "/")
    assert f"The rollout folder {root} cannot be read: permission denied." in runs_page
    uid = UID if UID is not None else "this user's"
    assert (
        f"the board runs as uid {uid}" in runs_page
        if UID is not None
        else "the board runs as uid" in runs_page
    )
    assert 'docker run --user "$(id -u):$(id -g)" -v /path/to/rollouts:/data:ro …' in runs_page
    assert "Make the folder readable by uid" in runs_page and "Mount a readable copy instead:" in runs_page
    for path in PAGES[1:]:
        text = _render(srv, path, f"?run={RUN}")
        assert (
            f"The rollout folder {root} cannot be read: permission denied. The runs page says what to do."
            in text
        )
        assert "What to do" in text, path
    polls = len(watch.seen) + len(watch.bad)
    wait_until(lambda: len(watch.seen) + len(watch.bad) >= polls + 4, 120, "four more polls of /healthz")
    assert watch.seen and set(watch.seen) == {"unreadable: permission denied"} and watch.bad == []
    _assert_clean_log(srv)


@pytest.fixture(scope="module")
def mixed_root_server(fixtures_dir):
    """gunicorn as an unprivileged user on a root of three runs: one it may not read, one with a file it
    may not read (rank1.jsonl), one it reads whole."""
    require_unprivileged_python()
    root, cache = open_folder(), open_folder(writable=True)
    for run in (RUN, OTHER, CLOSED):
        readable_copy(fixtures_dir / run, root / run)
    make_unreadable(root / CLOSED)
    make_unreadable(root / RUN / "rank1.jsonl")
    srv = GunicornServer(root, cache, unprivileged=True, RLBOARD_REFRESH_SECONDS="1")
    try:
        with srv, HealthWatch(srv.base) as watch:
            yield srv, watch, root
    finally:
        for path in (root, root.with_name(root.name + "-unmounted")):
            remove(path)
        remove(cache)


def test_unreadable002_one_run_closed(mixed_root_server):
    """The runs page lists the closed run and the closed file with their reasons beside the runs that
    load; /healthz counts the readable runs and names the closed one."""
    srv, watch, _ = mixed_root_server
    health = requests.get(srv.base + "/healthz", timeout=60).json()
    assert (health["runs"], health["root"], health["unreadable"]) == (2, "ok", {CLOSED: "permission denied"})

    def names_the_file():  # the file is found unreadable by the run's first ingest
        page = _render(srv, "/")
        return page if "rank1.jsonl: permission denied" in page else None

    page = wait_until(names_the_file, 120, "the runs page to name the unreadable rank1.jsonl", interval=0.5)
    assert f"1 folder under {srv.env['RLBOARD_ROOT']} cannot be read: not shown as runs." in page
    assert f"{CLOSED}: permission denied (owned by uid " in page
    assert "1 file of this run cannot be read: its lines are not shown." in page
    assert "rank1.jsonl: permission denied (owned by uid " in page
    assert 'docker run --user "$(id -u):$(id -g)"' in page
    closed = f"Run {CLOSED!r} cannot be read: permission denied. The runs page says what to do."
    # A link to the closed run names it, not "unknown run" (prompts: a callback).
    for path in (*PAGES[1:4], "/compare"):
        text = _render(srv, path, f"?run={CLOSED}")
        assert closed in text and "Unknown run" not in text, path
    assert watch.bad == []
    _assert_clean_log(srv)


def test_unreadable003_readable_runs_serve_every_page(mixed_root_server):
    """Each readable run renders on every page, and exports its responses (for the run with a closed file:
    those of its readable file, 200 of 400)."""
    srv, watch, _ = mixed_root_server
    for run in (RUN, OTHER):
        for path in PAGES:
            assert requests.get(srv.base + path, params={"run": run}, timeout=30).status_code == 200
            text = _render(srv, path, f"?run={run}")
            assert "cannot be read" not in text or path == "/", (run, path)
    r = requests.get(srv.base + "/export", params={"run": RUN, "step": "all", "format": "csv"}, timeout=60)
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == 200 and {row["source"] for row in rows} == {"rank0.jsonl"}
    assert watch.bad == []
    _assert_clean_log(srv)


def test_unreadable004_root_unmounted_and_back(mixed_root_server):
    """A root that disappears (an unmounted share): /healthz stays 200 and says "missing", the runs page
    says the folder is not there; when it is back, its runs are found again without a restart."""
    srv, watch, root = mixed_root_server
    away = root.with_name(root.name + "-unmounted")
    root.rename(away)
    try:
        health = requests.get(srv.base + "/healthz", timeout=60).json()
        assert (health["runs"], health["root"]) == (0, "missing: no such folder")
        page = _render(srv, "/")
        assert f"The rollout folder {root} is not there: no such folder." in page
        assert "Mount the rollout folder" in page
        assert "is not there: no such folder. The runs page says what to do." in _render(
            srv, "/reward", f"?run={RUN}"
        )
        time.sleep(2.0)  # the thing under test: time passes, failed polls meanwhile lengthen the back-off
    finally:
        away.rename(root)
    wait_until(
        lambda: requests.get(srv.base + "/healthz", timeout=30).json()["runs"] == 2,
        120,
        "the runs to come back",
        interval=0.5,
    )
    assert watch.bad == []
    assert "missing: no such folder" in watch.seen
    _assert_clean_log(srv)
