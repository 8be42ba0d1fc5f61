"""Shared pytest setup: Chromium options for dash[testing]'s `dash_duo`, auto-skip of browser tests when
Chromium is missing, and the `fixtures_dir` fixture (sample rollout files shared between worktrees).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS_DIR = REPO_ROOT / "assets"
FIXTURES_DIR = REPO_ROOT.parent / "shared" / "fixtures"

# Debian's packages: `chromium` and `chromium-driver`. selenium 4.2 predates Selenium Manager, so it
# downloads nothing: it starts the `chromedriver` it finds on PATH.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
BROWSER_FIXTURES = {"dash_duo", "dash_br", "dash_duo_mp", "dash_thread_server", "dash_process_server"}

# dash.testing.browser already adds --no-sandbox (unconditionally, not only as root), --disable-gpu and
# --disable-dev-shm-usage; they are repeated here so the harness does not depend on that. The others stop
# Chromium's background services from retrying the (closed) network: component updates, sync, field
# trials, first-run fetches.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--window-size=1400,1000",
)


def pytest_setup_options():
    """dash[testing] hook: the ChromeOptions every `dash_duo` browser starts with."""
    from selenium.webdriver.chrome.options import Options

    options = Options()
    if CHROMIUM:
        options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    # A server has no display: run headless even when `--headless` was forgotten, instead of failing
    # with "Missing X server or $DISPLAY".
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        options.add_argument("--headless")
    return options


@pytest.hookimpl(tryfirst=True)  # before `-m "not browser"` deselects, so the auto-added mark counts
def pytest_collection_modifyitems(config, items):
    """Mark every test that starts a browser as `browser`; skip them all when Chromium is missing."""
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path]
    skip = pytest.mark.skip(
        reason=f"browser test: {' and '.join(missing)} not found on PATH "
        "(Debian: apt-get install chromium chromium-driver)"
    )
    for item in items:
        if BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)
        if missing and item.get_closest_marker("browser"):
            item.add_marker(skip)


# What a browser test waits for at most when it names no timeout (dash[testing]'s 10 s is short on a loaded
# machine: a page's first callbacks there take longer). It only bounds a wait: a condition met returns at once.
BROWSER_WAIT_SECONDS = 30


@pytest.fixture
def dash_thread_server():
    """dash[testing]'s thread server, its stop bounded: dash's ``ThreadedRunner.stop`` raises SystemExit in
    every thread started since the server (request handlers too), then joins the server thread with no
    timeout. A handler killed between its start and its ``_started`` signal leaves the server thread
    waiting in ``Thread.start()`` on a lock no exception reaches: the join never returns (a test run of
    main hung 20 min so, under load). Here the join waits up to 30 s (a thread on its way out on a loaded
    machine ends well within that) and then leaves a stuck daemon thread be (its port is this test's
    alone)."""
    from dash.testing.application_runners import ThreadedRunner

    class BoundedStop(ThreadedRunner):
        def stop(self):
            self.thread.kill()
            self.thread.join(timeout=30)
            self._app, self.started = None, False

    with BoundedStop() as runner:
        yield runner


def _new_composite(config, download: Path):
    """A Chromium driven as dash[testing]'s ``dash_duo`` makes it (the same options), with no server yet."""
    from dash.testing.composite import DashComposite

    return DashComposite(
        server=None,
        browser=config.getoption("webdriver"),
        remote=config.getoption("remote"),
        remote_url=config.getoption("remote_url"),
        headless=config.getoption("headless"),
        options=config.hook.pytest_setup_options(),
        download_path=str(download),
        percy_assets_root=config.getoption("percy_assets"),
        percy_finalize=config.getoption("nopercyfinalize"),
        pause=config.getoption("pause"),
    )


def _as_new(dc) -> None:
    """Leave a shared browser as a new one would start the next test: one tab on a blank page (no page left
    polling a server about to stop), no cookie (a token's), the window's first size, its console read."""
    driver = dc.driver
    for handle in driver.window_handles[1:]:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(driver.window_handles[0])
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.set_window_size(1400, 1000)
    driver.get_log("browser")  # read: what the last page logged is not the next test's
    dc._last_ts, dc._url, dc._window_idx = 0, "", 0


@pytest.fixture(scope="module")
def _module_browser(request, tmp_path_factory):
    """One Chromium for a module's `dash_duo` tests (``[composite]``: replaced when a test leaves it
    broken). Starting and quitting one took ~5 s of each browser test under load; each test still gets its
    own server, on a port (so an origin and its storage) of its own, and a browser reset as new."""
    holder = [_new_composite(request.config, tmp_path_factory.mktemp("download"))]
    yield holder
    holder[0].__exit__(None, None, None)


@pytest.fixture
def dash_duo(_module_browser, dash_thread_server, request, tmp_path, tmp_path_factory):
    """dash[testing]'s `dash_duo` (a thread server and a download folder of this test's own, and a
    Chromium), the module's browser reset as new (:func:`_as_new`), its waits bounded at
    :data:`BROWSER_WAIT_SECONDS`."""
    from selenium.common.exceptions import WebDriverException

    dc = _module_browser[0]
    dc.server = dash_thread_server
    dc.wait_timeout = BROWSER_WAIT_SECONDS
    download = tmp_path / "download"
    download.mkdir()
    dc._download_path = str(download)  # what `dash_duo.download_path` says, as dash_duo sets it up
    dc.driver.execute_cdp_cmd(
        "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(download)}
    )
    yield dc
    try:
        _as_new(dc)
    except WebDriverException:  # a browser the test left broken: the next test gets a new one
        dc.__exit__(None, None, None)
        _module_browser[0] = _new_composite(request.config, tmp_path_factory.mktemp("download"))


@pytest.fixture
def dash_br(dash_br):
    """dash[testing]'s `dash_br`, its waits bounded at :data:`BROWSER_WAIT_SECONDS`."""
    dash_br.wait_timeout = BROWSER_WAIT_SECONDS
    return dash_br


@pytest.fixture(scope="session")
def assets_dir() -> Path:
    """The app's `assets/` folder (vendored Bootstrap, icons, app.css), for test apps."""
    return ASSETS_DIR


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """`../shared/fixtures` next to the repo: real-world rollout files; skips the test when absent."""
    if not FIXTURES_DIR.is_dir():
        pytest.skip(f"shared rollout fixtures not found at {FIXTURES_DIR}")
    return FIXTURES_DIR


@pytest.fixture(scope="session")
def contract_root(fixtures_dir) -> Path:
    """A rollout root holding copies of the fixture runs written in this project's contract (the app's root
    in tests); the trainers' own dumps beside them in ../shared/fixtures are tested on their own."""
    return CONTRACT_ROOT


@pytest.fixture(autouse=True)
def _free_dash_port():
    """Each `dash_duo` server on a port free right now, so two checkouts can run the suite at once
    (dash[testing] counts up from a fixed 58050)."""
    from dash.testing.application_runners import BaseDashRunner

    BaseDashRunner._next_port = free_port()
    yield


def fixture_or_demo(fixtures_dir: Path, root: Path, run: str | None, steps: int, per_step: int = 16) -> Path:
    """The folder of fixture run ``run``, or, for ``run=None``, the demo generator's run of ``steps`` steps
    of ``per_step`` responses written under ``root``; skips the test when that fixture is absent."""
    if run is None:
        from data.demo import write_demo_run

        return write_demo_run(root, "demo", steps=steps, per_step=per_step)
    src = fixtures_dir / run
    if not src.exists():
        pytest.skip(f"fixture {run} is not in {fixtures_dir}")
    return src


def free_port() -> int:
    """A loopback TCP port that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_configure(config):
    # selenium 4.2 calls `HTTPResponse.getheader`, deprecated by urllib3, on every WebDriver command: dozens of
    # identical warnings per browser test that bury the useful ones. (Warnings raised while plugins are
    # imported, before conftest runs, can only be filtered in pyproject.toml.)
    config.addinivalue_line("filterwarnings", "ignore:HTTPResponse.getheader:DeprecationWarning")


# ---- the app under test ---------------------------------------------------------------------------------
# `app.py` builds its app at import from RLBOARD_* variables: point it at the shared fixtures (or the demo
# when they are absent) and at a throw-away cache before any test imports it.
os.environ.setdefault("RLBOARD_CACHE_DIR", tempfile.mkdtemp(prefix="rlboard-test-cache-"))
# Only the runs in the contract: the trainers' own dumps in ../shared/fixtures would change what the pages
# show by default (the first run by name) and how many runs there are.
CONTRACT_RUNS = ("rlloggingboard-eval-poem", "trl-grpo-small", "trl-ppo-small")


def growing_demo_stores(run: Path, cache: Path, more_dir: Path, pads):
    """The stores of ``run`` as another demo run (14 steps) takes its place (every file read again, the
    first parts dropped), then grows a few lines at a time, each a commit of a live run (its last step
    hidden): one store per commit."""
    from data.demo import write_demo_run
    from data.ingest import ingest_run
    from data.store import open_store

    more = write_demo_run(more_dir, "demo", steps=14, per_step=16)
    for cut in (90, 80, 70, 60, 50, 40, 30, 20, 10, 5):
        for f in sorted(more.glob("*.jsonl")):
            lines = f.read_bytes().splitlines(keepends=True)
            (run / f.name).write_bytes(b"".join(lines[: len(lines) - cut]))
        store = open_store(ingest_run(run, cache, pads, complete=False).store_dir)
        assert store.visible_below is not None
        yield store


# Every run of ../shared/fixtures (see its README), for tests that hold on each of them.
FIXTURE_RUNS = (
    "rlloggingboard-eval-poem",
    "trl-ppo-small",
    "trl-grpo-small",
    "trl-grpo-completions",
    "real-verl-gsm8k-tools",
    "real-nemo-gym-math",
    "real-verifiers-math-python",
)
CONTRACT_ROOT = Path(tempfile.mkdtemp(prefix="rlboard-test-root-"))
if FIXTURES_DIR.is_dir():
    for _run in CONTRACT_RUNS:
        shutil.copytree(FIXTURES_DIR / _run, CONTRACT_ROOT / _run)
    os.environ.setdefault("RLBOARD_ROOT", str(CONTRACT_ROOT))


@pytest.fixture(scope="session")
def dash_app():
    """The one Dash app of the test session (pages register once per process)."""
    import app as app_module

    return app_module.app


@pytest.fixture
def client(dash_app):
    """Flask test client of the app."""
    return dash_app.server.test_client()


@pytest.fixture
def board_root():
    """Point the app at another rollout root for one test: ``board_root(path)`` returns the Board.

    The original board (shared fixtures) is restored afterwards.
    """
    from dataclasses import replace

    from data import service

    prev = service.board().settings

    def _configure(root, **kw):
        return service.configure(replace(prev, root=Path(root), **kw))

    yield _configure
    service.configure(prev)


def page_url_key(path: str) -> str:
    """How Dash names the page at ``path``'s own dcc.Location (id ``{"type": "app-page-url", "path": path}``,
    see components.layout.page_url) in a callback's ``output`` and ``changedPropIds``: its id as JSON with
    sorted keys."""
    return json.dumps({"path": path, "type": "app-page-url"}, separators=(",", ":"))


def _id_key(id_) -> str:
    return json.dumps(id_, sort_keys=True, separators=(",", ":")) if isinstance(id_, dict) else id_


def dash_post(
    client, output: str, inputs: list[dict], state: list[dict] | None = None, changed: list[str] | None = None
):
    """POST one callback the way the Dash renderer does; returns the parsed JSON ``response`` dict.

    ``output`` is Dash's output key: ``"id.prop"`` for one output, ``"..a.x...b.y.."`` for several.
    ``inputs``/``state`` are lists of ``{"id": ..., "property": ..., "value": ...}``.
    """
    outputs = []
    for part in output.strip(".").split("..."):
        cid, prop = part.rsplit(".", 1)
        outputs.append({"id": json.loads(cid) if cid.startswith("{") else cid, "property": prop})
    body = {
        "output": output,
        "outputs": outputs if output.startswith("..") else outputs[0],
        "inputs": inputs,
        "state": state or [],
        "changedPropIds": changed
        if changed is not None
        else [f"{_id_key(i['id'])}.{i['property']}" for i in inputs if isinstance(i, dict)],
    }
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code in (200, 204), r.data[:500]
    return r.get_json()["response"] if r.status_code == 200 else None


def router_body(path: str, search: str = "") -> dict:
    """The POST the Dash renderer sends to render a page (the pages router callback) for ``path``+``search``."""
    return {
        "output": ".._pages_content.children..._pages_store.data..",
        "outputs": [
            {"id": "_pages_content", "property": "children"},
            {"id": "_pages_store", "property": "data"},
        ],
        "inputs": [
            {"id": "_pages_location", "property": "pathname", "value": path},
            {"id": "_pages_location", "property": "search", "value": search},
        ],
        "state": [],
        "changedPropIds": ["_pages_location.pathname"],
    }


def find(component, cid):
    """The component with id ``cid`` in a layout tree, or None."""
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            hit = find(child, cid)
            if hit is not None:
                return hit
    return None
