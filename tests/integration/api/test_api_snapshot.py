"""`app.py query` and `app.py snapshot` (the views without a server) and the /snapshot/<view> download: the
command line answers what the API answers, on the app's store and beside a real `app.py serve` on the same
cache; bad input is one line and exit code 2; the download is one HTML file named after the view."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from tests.conftest import CONTRACT_ROOT, REPO_ROOT, free_port
from tests.waiting import wait_until

RUNS = {"rlloggingboard-eval-poem", "trl-grpo-small", "trl-ppo-small"}


def cli(*args, root=None, cache=None, timeout=300):
    # The test app's own root and store (tests/conftest.py): under xdist a worker's CONTRACT_ROOT is a copy
    # of its own, while the app reads the root the environment names (the first process's copy).
    root = root or os.environ.get("RLBOARD_ROOT", str(CONTRACT_ROOT))
    cache = cache or os.environ["RLBOARD_CACHE_DIR"]
    return subprocess.run(
        [sys.executable, "app.py", *args, "--root", str(root), "--cache-dir", str(cache)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _ready(client, query=""):
    """The runs page's answer once every run is read (the command line reads them all before answering)."""

    def got():
        a = client.get(f"/api/v1/runs{query}").get_json()
        return a["rows"] and all(r["state"] == "ready" for r in a["rows"]) and a

    return wait_until(got, 120, "every run read")


@pytest.mark.parametrize("query", ["", "?bogus=1&run=nope"])
def test_apisnap001_query_is_the_api(client, fixtures_dir, query):
    """`query "/?…"` prints the API's JSON for the runs page, a URL with parameters the page ignores too;
    standard output holds only the answer, the progress is on standard error."""
    api = _ready(client, query)
    p = cli("query", f"/{query}")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == api
    assert {r["run"] for r in api["rows"]} == RUNS
    assert all(f"reading run {r}" in p.stderr for r in RUNS)


def test_apisnap002_query_of_a_page_with_a_bad_parameter(client, fixtures_dir):
    """A page's answer for a URL with a bad value (the reward page): the command line says the same notice
    as the API."""
    url = "/reward?run=trl-ppo-small&step=abc"
    api = wait_until(
        lambda: (r := client.get("/api/v1/" + url[1:])).status_code == 200 and r.get_json(), 120, url
    )
    p = cli("query", url)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == api and api["notices"]


def test_apisnap003_query_table(client, fixtures_dir):
    """--format table: a line of what was read, the figures by id, then the runs table's rows in columns."""
    _ready(client)
    p = cli("query", "/", "--format", "table")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("page / · rlloggingboard-eval-poem: store format ")
    assert "figure runs-spark-trl-ppo-small: mean reward per step of trl-ppo-small (1 traces)" in lines
    at = lines.index("table runs-table: 3 of 3 rows")
    assert lines[at + 1].split()[:3] == ["run", "state", "progress"]
    assert [x.split()[0] for x in lines[at + 2 :]] == sorted(RUNS)
    assert "reading run" not in p.stdout


@pytest.mark.parametrize(
    ("url", "root", "said"),
    [
        ("/nope", None, "error: No page at '/nope': one of /"),
        ("/", "/no/such/folder", "error: no such folder: /no/such/folder"),
    ],
)
def test_apisnap004_bad_input_one_line_exit_2(fixtures_dir, url, root, said):
    """An unknown page, a root that is not there: one line on stderr, exit code 2, nothing on stdout (for
    `snapshot` too)."""
    for cmd in ("query", "snapshot"):
        p = cli(cmd, url, root=root or CONTRACT_ROOT)
        assert p.returncode == 2 and p.stdout == "", (cmd, p.stdout[:200], p.stderr)
        assert p.stderr.startswith(said) and len(p.stderr.splitlines()) == 1, p.stderr


def test_apisnap010_unknown_run_one_line_exit_2(fixtures_dir):
    """A run the URL names that is not under the root: one line naming it and the runs, exit code 2 (asked
    of a page with an answer that shows a run, where one is on this branch); the runs page reads them all."""
    from cli_views import ViewError, runs_named

    runs = dict.fromkeys(sorted(RUNS))
    assert runs_named("/", {"run": ["nope"]}, runs) == sorted(RUNS)
    assert runs_named("/compare", {"run": ["trl-ppo-small", "trl-grpo-small", "trl-ppo-small"]}, runs) == [
        "trl-ppo-small",
        "trl-grpo-small",
    ]
    assert runs_named("/reward", {}, runs) == ["rlloggingboard-eval-poem"]  # the run the page falls back to
    with pytest.raises(ViewError, match=r"^unknown run 'nope' \(runs: rlloggingboard-eval-poem, "):
        runs_named("/reward", {"run": ["nope"]}, runs)
    p = cli("query", "/reward?run=nope")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: unknown run 'nope' (runs: ") and len(p.stderr.splitlines()) == 1


def test_apisnap005_unreadable_root_one_line(fixtures_dir):
    """A root this user may not read: one line naming it, exit code 2."""
    from tests.unprivileged import (
        as_unprivileged,
        make_unreadable,
        open_folder,
        readable_copy,
        remove,
        unprivileged_python,
    )

    exe, env = unprivileged_python()
    root, cache = open_folder(), open_folder(writable=True)
    try:
        readable_copy(fixtures_dir / "trl-ppo-small", root / "trl-ppo-small")
        make_unreadable(root)
        cmd = as_unprivileged([exe, "app.py", "query", "/", "--root", str(root), "--cache-dir", str(cache)])
        env_all = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
        p = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env_all)
        assert p.returncode == 2 and p.stdout == "", p.stderr
        assert p.stderr.startswith(f"error: The rollout folder {root} cannot be read: permission denied.")
        assert len(p.stderr.splitlines()) == 1
    finally:
        remove(root)
        remove(cache)


def test_apisnap006_query_beside_a_server_on_the_same_cache(tmp_path):
    """With `app.py serve` on the same --cache-dir reading the run at the same moment (its first request),
    `query` answers what the server's API answers: one store, read by whichever process holds its lock."""
    import requests

    from data.demo import write_demo_run

    root, cache, port = tmp_path / "root", tmp_path / "cache", free_port()
    write_demo_run(root, "demo", steps=30, per_step=64)
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "app.py",
                "serve",
                "--root",
                str(root),
                "--cache-dir",
                str(cache),
                "--port",
                str(port),
            ],
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def health():
            assert proc.poll() is None, log.read_text()
            try:
                return requests.get(f"{base}/healthz", timeout=60)
            except requests.ConnectionError:
                return None

        wait_until(health, 180, lambda: f"the server to listen:\n{log.read_text()}", interval=0.3)
        # The server's first read of the run and the command line's, at once.
        first = threading.Thread(target=lambda: requests.get(f"{base}/api/v1/runs", timeout=300))
        first.start()
        p = cli("query", "/", root=root, cache=cache)
        first.join()
        assert p.returncode == 0, p.stderr

        def served():
            a = requests.get(f"{base}/api/v1/runs", timeout=120).json()
            return a["rows"] and a["rows"][0]["state"] == "ready" and a

        api = wait_until(served, 120, "the server's read")
        assert json.loads(p.stdout) == api
        assert api["rows"][0]["responses"] == 30 * 64
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_apisnap007_snapshot_download(client, fixtures_dir):
    """/snapshot/runs answers one HTML file as a download named runs-all-<time>.html, holding each run, its
    header and the board's URL of the view; an unknown view is 404."""
    _ready(client)
    r = client.get("/snapshot/runs?x=1")
    assert r.status_code == 200 and r.mimetype == "text/html"
    disposition = r.headers["Content-Disposition"]
    assert re.fullmatch(r'attachment; filename="runs-all-\d{8}T\d{6}Z\.html"', disposition), disposition
    doc = r.get_data(as_text=True)
    assert all(f"<td>{run}</td>" in doc for run in RUNS)
    assert 'view <a href="http://localhost/?x=1" rel="noreferrer">' in doc
    assert doc.count('class="snap-plot"') == 3  # the three sparklines
    assert client.get("/snapshot/nope").status_code == 404


def test_apisnap008_token_guards_the_snapshot(dash_app, board_root, fixtures_dir):
    """With RLBOARD_TOKEN set, /snapshot/… without the token is refused, as the pages are."""
    board_root(CONTRACT_ROOT, token="t0ken-42")
    c = dash_app.server.test_client()
    assert c.get("/snapshot/runs").status_code == 401
    assert c.get("/snapshot/runs", headers={"Authorization": "Bearer t0ken-42"}).status_code == 200


def test_apisnap009_snapshot_command_writes_the_file(client, fixtures_dir, tmp_path):
    """`snapshot "/" -o FILE` writes the runs page's file (its rows, the store it read); stdout is empty."""
    _ready(client)
    out = tmp_path / "view.html"
    p = cli("snapshot", "/", "-o", str(out))
    assert p.returncode == 0 and p.stdout == "", p.stderr
    doc = out.read_text()
    assert doc.startswith("<!DOCTYPE html>") and all(f"<td>{run}</td>" in doc for run in RUNS)
    assert "view <code>/</code>" in doc and "store format " in doc
    assert f"wrote {out}" in p.stderr


def test_apisnap011_query_into_a_reader_that_stops(client, fixtures_dir):
    """`query … | head -c 0`: the reader closed the pipe; the command stops, exit code 1, no traceback."""
    _ready(client)
    cmd = [
        sys.executable,
        "app.py",
        "query",
        "/",
        "--root",
        os.environ.get("RLBOARD_ROOT", str(CONTRACT_ROOT)),
    ]
    cmd += ["--cache-dir", os.environ["RLBOARD_CACHE_DIR"]]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the answer is written (the command reads the runs first)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1 and "Traceback" not in err and "BrokenPipe" not in err, err
