"""The app as the Docker image serves it: real gunicorn (gunicorn.conf.py, 2 workers) on a loopback port,
under a URL prefix as behind a lab's reverse proxy, against the shared fixture runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port, router_body
from tests.unprivileged import as_unprivileged, unprivileged_python
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
PAGES = ("/", "/reward", "/responses", "/tokens", "/prompts", "/compare")
RUN = "trl-ppo-small"


class GunicornServer:
    """``gunicorn -c gunicorn.conf.py app:server`` in its own process group, configured like the image
    (RLBOARD_* variables only), bound to 127.0.0.1."""

    def __init__(
        self,
        root: Path,
        cache: Path,
        prefix: str = "/",
        workers: int = 2,
        threads: int = 4,
        unprivileged: bool = False,
        **env,
    ):
        self.unprivileged = unprivileged  # run as a user who may not read everything (tests.unprivileged)
        self.port = free_port()
        self.prefix = prefix
        self.base = f"http://127.0.0.1:{self.port}{prefix.rstrip('/')}"
        self.log = Path(cache) / f"gunicorn-{self.port}.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "GUNICORN_"))}
        self.env = {
            **clean,
            "RLBOARD_ROOT": str(root),
            "RLBOARD_CACHE_DIR": str(cache),
            "RLBOARD_HOST": "127.0.0.1",
            "RLBOARD_PORT": str(self.port),
            "RLBOARD_URL_PREFIX": prefix,
            "RLBOARD_DEMO": "0",
            "RLBOARD_WORKERS": str(workers),
            "RLBOARD_THREADS": str(threads),
            **{k: str(v) for k, v in env.items()},
        }
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> GunicornServer:
        if "://" not in self.env["RLBOARD_CACHE_DIR"]:  # (a store on object storage: s3://…)
            Path(self.env["RLBOARD_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            exe, extra = unprivileged_python() if self.unprivileged else (sys.executable, {})
            cmd = [exe, "-m", "gunicorn", "-c", str(REPO / "gunicorn.conf.py"), "app:server"]
            self.proc = subprocess.Popen(
                as_unprivileged(cmd) if self.unprivileged else cmd,
                cwd=REPO,
                env={**self.env, **extra},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:  # a worker's first answer imports the app: slow on a loaded machine
                return requests.get(self.base + "/healthz", timeout=30).status_code == 200
            except requests.RequestException:
                return False

        try:
            wait_until(healthy, timeout, lambda: f"gunicorn to be healthy:\n{self.log_tail()}", interval=0.2)
        except TimeoutError:
            self.stop()
            raise
        return self

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)

    def __enter__(self) -> GunicornServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="module")
def prefixed_server(contract_root, tmp_path_factory):
    """gunicorn serving the fixture runs under /rlboard/ (as a reverse proxy passing the path through)."""
    with GunicornServer(contract_root, tmp_path_factory.mktemp("gunicorn-cache"), prefix="/rlboard/") as srv:
        yield srv


def test_gunicorn001_healthz(prefixed_server):
    """/healthz under the prefix answers JSON with the runs found; nothing is served outside the prefix."""
    r = requests.get(prefixed_server.base + "/healthz", timeout=10)
    assert r.status_code == 200 and r.json()["runs"] == 3
    outside = f"http://127.0.0.1:{prefixed_server.port}"
    assert requests.get(outside + "/healthz", timeout=10).status_code == 404
    assert requests.get(outside + "/reward", timeout=10).status_code == 404


def test_gunicorn002_every_page_renders(prefixed_server):
    """Each page's HTML, the layout, the callback graph and each page's rendered layout answer 200."""
    s = requests.Session()
    for path in PAGES:
        r = s.get(prefixed_server.base + path, params={"run": RUN}, timeout=30)
        assert r.status_code == 200, (path, r.status_code)
        assert '"requests_pathname_prefix":"\\u002frlboard\\u002f"' in r.text
    assert s.get(prefixed_server.base + "/_dash-layout", timeout=30).status_code == 200
    assert s.get(prefixed_server.base + "/_dash-dependencies", timeout=30).status_code == 200
    for path in PAGES:
        r = s.post(
            prefixed_server.base + "/_dash-update-component",
            json=router_body("/rlboard" + path if path != "/" else "/rlboard/", f"?run={RUN}"),
            timeout=60,
        )
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        assert "404 - Page not found" not in r.text, path
        assert "Traceback" not in r.text


def test_gunicorn003_assets_stay_under_the_prefix(prefixed_server):
    """Every script and stylesheet the page loads is under the prefix and is served (a proxy forwarding
    only /rlboard/ is enough); nothing comes from another host."""
    html = requests.get(prefixed_server.base + "/reward", timeout=30).text
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls
    for url in urls:
        assert url.startswith("/rlboard/"), url
        r = requests.get(f"http://127.0.0.1:{prefixed_server.port}{url}", timeout=30)
        assert r.status_code == 200, url


def test_gunicorn008_api_and_snapshot_under_the_prefix(prefixed_server):
    """Behind a prefix the JSON API and the snapshot answer under it (and not outside it), from gunicorn's
    workers: the runs answer names the three runs, a reward answer has its curves, the snapshot of the same
    view is one HTML file that names its run."""
    base = prefixed_server.base
    runs = requests.get(base + "/api/v1/runs", timeout=60).json()
    assert {r["run"] for r in runs["rows"]} >= {RUN}
    reward = requests.get(base + "/api/v1/reward", params={"run": RUN}, timeout=60)
    assert reward.status_code == 200 and reward.json()["run"] == RUN
    assert reward.json()["figures"]["reward-curve-reward"]["traces"]
    snap = requests.get(base + "/snapshot/reward", params={"run": RUN}, timeout=60)
    assert snap.status_code == 200 and snap.headers["Content-Type"].startswith("text/html")
    assert "attachment" in snap.headers["Content-Disposition"] and RUN in snap.text
    outside = f"http://127.0.0.1:{prefixed_server.port}"
    assert requests.get(outside + "/api/v1/runs", timeout=10).status_code == 404


def test_gunicorn004_two_workers(prefixed_server):
    """The server runs the configured number of worker processes."""
    out = subprocess.run(["pgrep", "-P", str(prefixed_server.proc.pid)], capture_output=True, text=True)
    assert len(out.stdout.split()) == 2, prefixed_server.log_tail()


def test_gunicorn005_compressed_when_asked(prefixed_server):
    """Scripts and callback answers come gzip-compressed to a browser that accepts it, and decompress to the
    very bytes served uncompressed; an export is never compressed (its first byte must not wait)."""
    import gzip

    import plotly

    base = prefixed_server.base
    plotly_js = base + "/_dash-component-suites/plotly/package_data/plotly.min.js"
    raw = Path(plotly.__file__).parent.joinpath("package_data", "plotly.min.js").read_bytes()
    r = requests.get(plotly_js, headers={"Accept-Encoding": "gzip"}, stream=True, timeout=30)
    body = r.raw.read()
    assert r.headers.get("Content-Encoding") == "gzip", r.headers
    assert len(body) < len(raw) / 3 and gzip.decompress(body) == raw
    plain = requests.get(plotly_js, headers={"Accept-Encoding": "identity"}, timeout=30)
    assert "Content-Encoding" not in plain.headers and plain.content == raw

    post = dict(json=router_body("/rlboard/reward", f"?run={RUN}"), timeout=60)
    r = requests.post(
        base + "/_dash-update-component", headers={"Accept-Encoding": "gzip"}, stream=True, **post
    )
    body = r.raw.read()
    plain = requests.post(base + "/_dash-update-component", headers={"Accept-Encoding": "identity"}, **post)
    assert r.headers.get("Content-Encoding") == "gzip" and gzip.decompress(body) == plain.content

    r = requests.get(
        base + "/export", params={"run": RUN, "step": "all"}, headers={"Accept-Encoding": "gzip"}
    )
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    assert "Content-Encoding" not in r.headers


def test_gunicorn006_workers_freeze_their_start_up_objects():
    """gunicorn.conf.py's post_worker_init hook (which ``app.py serve`` loads too) moves what a worker made
    while building the app out of the garbage collector's full collections (gc.freeze)."""
    import gc
    import runpy

    from gunicorn.config import Config

    hook = runpy.run_path(str(REPO / "gunicorn.conf.py"))["post_worker_init"]
    cfg = Config()
    cfg.set("post_worker_init", hook)  # a valid gunicorn hook (one argument, the worker)
    gc.unfreeze()
    try:
        cfg.post_worker_init(None)
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


def test_gunicorn007_threads_for_exports_beside_the_pages(monkeypatch):
    """A worker has RLBOARD_EXPORT_THREADS (default 3) threads beyond RLBOARD_THREADS: an export holds its
    thread while it streams, and three on one worker left its pages one thread of four."""
    import runpy

    for name in ("RLBOARD_THREADS", "RLBOARD_EXPORT_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert runpy.run_path(str(REPO / "gunicorn.conf.py"))["threads"] == 4 + 3
    monkeypatch.setenv("RLBOARD_THREADS", "6")
    monkeypatch.setenv("RLBOARD_EXPORT_THREADS", "0")
    assert runpy.run_path(str(REPO / "gunicorn.conf.py"))["threads"] == 6
    monkeypatch.setenv("RLBOARD_EXPORT_THREADS", "-1")
    with pytest.raises(SystemExit, match="RLBOARD_EXPORT_THREADS must be at least 0"):
        runpy.run_path(str(REPO / "gunicorn.conf.py"))
