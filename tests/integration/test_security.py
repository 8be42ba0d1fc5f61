"""Safe by default on a shared machine: only runs found under the rollout root are reachable (every traversal
trick is an "unknown run" on pages and a 404 on /export), no stack trace reaches a browser, /healthz
answers even while a run is being ingested."""

from __future__ import annotations

import json
import shutil
import threading
import time
from urllib.parse import quote

import pytest

import routes
from data import live, service
from data.service import UnknownRun
from tests.conftest import page_url_key, router_body
from tests.waiting import wait_until

PAGES = ("/reward", "/scatter", "/responses", "/tokens", "/prompts")

# Raw query-string values of `run=` (already percent-encoded where the attack is in the encoding).
TRAVERSALS = {
    "dotdot": "../..",
    "dotdot-etc": "../../../../etc",
    "parent-of-run": "trl-ppo-small/..",
    "sibling-via-dotdot": "trl-ppo-small/../trl-grpo-small",
    "dot-slash": "./trl-ppo-small",
    "trailing-slash": "trl-ppo-small/",
    "absolute-etc": "/etc",
    "absolute-run": "/work/shared/fixtures/trl-ppo-small",
    "encoded-dotdot": "%2e%2e%2f%2e%2e",
    "encoded-slash": "..%2F..%2Fetc%2Fpasswd",
    "double-encoded": "%252e%252e%252f%252e%252e",
    "overlong-utf8": "%c0%ae%c0%ae%2f",
    "backslash": "..%5C..%5C",
    "nul": "trl-ppo-small%00",
    "nul-dotdot": "trl-ppo-small%00%2f..%2f..",
    "tilde": "~",
    "space": "%20trl-ppo-small",
    "html": "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
}


def _q(value: str) -> str:
    return "?run=" + value


def _render(client, path: str, search: str) -> str:
    """The page layout Dash's router renders for ``path`` + ``search``, as JSON text."""
    body = router_body(path, search)
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 200, (path, search, r.status_code, r.data[:300])
    return r.get_data(as_text=True)


def _url_callbacks(dash_app, page: str) -> list[tuple[str, dict]]:
    """The page's server callbacks that read its URL (its own Location's search): they decode the view state
    (a clientside one, which has no Python function, runs in the browser)."""
    client = dash_app.server.test_client()
    client.get("/")  # Dash registers the pages' router on the first request
    url = {"id": page_url_key(f"/{page}"), "property": "search"}
    return [
        (key, cb) for key, cb in dash_app.callback_map.items() if url in cb["inputs"] and "callback" in cb
    ]


def _page_text(dash_app, client, path: str, search: str) -> str:
    """What a browser gets for ``path`` + ``search``: the layout, then what the page's URL callbacks
    answer (some pages show their notices from a callback), as one JSON text."""
    texts = [_render(client, path, search)]
    page = path.strip("/")
    for key, cb in _url_callbacks(dash_app, page):
        outputs = [
            {"id": _id(part.rsplit(".", 1)[0]), "property": part.rsplit(".", 1)[1]}
            for part in key.strip(".").split("...")
        ]
        inputs = [
            {**i, "value": search if i == {"id": page_url_key(f"/{page}"), "property": "search"} else None}
            for i in cb["inputs"]
        ]
        body = {
            "output": key,
            "outputs": outputs if key.startswith("..") else outputs[0],
            "inputs": inputs,
            "state": [{**st, "value": None} for st in cb.get("state", [])],
            "changedPropIds": [page_url_key(f"/{page}") + ".search"],
        }
        r = client.post("/_dash-update-component", json=body)
        assert r.status_code in (200, 204), (path, search, key, r.status_code, r.data[:300])
        texts.append(r.get_data(as_text=True))
    return "\n".join(texts)


def _id(key: str):
    """A component id from a callback map's key: a dict id is written there as JSON."""
    return json.loads(key) if key.startswith("{") else key


def _has_page(dash_app, path: str) -> bool:
    import dash

    return any(p["path"] == path for p in dash.page_registry.values())


def test_sec001_healthz(client, fixtures_dir):
    """/healthz answers 200 with JSON: status, version, the number of runs found, the root's state and the
    run folders it may not read."""
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.mimetype == "application/json"
    body = r.get_json()
    assert body == {"status": "ok", "version": routes.VERSION, "runs": 3, "root": "ok", "unreadable": {}}


@pytest.mark.parametrize("case", sorted(TRAVERSALS))
def test_sec002_traversal_is_unknown_run(case, dash_app, client, fixtures_dir):
    """Each traversal trick is refused by the data layer and shown as "unknown run" on every run page."""
    from urllib.parse import parse_qs

    decoded = parse_qs(_q(TRAVERSALS[case]).lstrip("?"))["run"][0]
    with pytest.raises(UnknownRun):
        service.board().run_dir(decoded)
    assert live.run_version(decoded) is None
    missing = [p for p in PAGES if not _has_page(dash_app, p)]
    assert not missing, f"pages not registered: {missing}"
    for path in PAGES:
        text = _page_text(dash_app, client, path, _q(TRAVERSALS[case]))
        assert "unknown run" in text.lower(), (path, case, text[:400])
        assert "Traceback" not in text
    # The runs page takes no run: it still renders, listing only the real runs.
    text = _render(client, "/", _q(TRAVERSALS[case]))
    assert "trl-ppo-small" in text and "passwd" not in text


@pytest.mark.parametrize("case", sorted(TRAVERSALS))
def test_sec003_traversal_export_is_404(case, client, fixtures_dir):
    """/export answers 404 (never a file, never a 500) for every traversal trick."""
    r = client.get("/export" + _q(TRAVERSALS[case]))
    assert r.status_code == 404, (case, r.status_code, r.data[:200])
    assert b"Traceback" not in r.data


def test_sec004_export_of_a_real_run_works(client, fixtures_dir):
    """The same route serves a real run (so the 404s above are not a broken route)."""
    r = client.get("/export?run=trl-ppo-small&step=1&format=jsonl")
    assert r.status_code == 200
    lines = r.get_data(as_text=True).splitlines()
    assert len(lines) == 16 and all(json.loads(ln)["step"] == 1 for ln in lines)


@pytest.fixture
def escape_root(tmp_path, fixtures_dir):
    """A rollout root with a real run, a run folder that is a symlink to a folder outside the root, and a
    file symlink inside the real run that points outside it."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    shutil.copy(fixtures_dir / "trl-ppo-small" / "rank0.jsonl", root / "real" / "rank0.jsonl")
    shutil.copy(fixtures_dir / "trl-grpo-small" / "rank0.jsonl", outside / "secret.jsonl")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "real" / "leak.jsonl").symlink_to(outside / "secret.jsonl")
    (root / "inside-link").symlink_to(root / "real", target_is_directory=True)
    return root


def test_sec005_symlinks_out_of_the_root(escape_root, board_root, dash_app, client):
    """A run folder linking out of the root is not a run; a file linking out of a run is not read."""
    b = board_root(escape_root)
    assert set(b.runs()) == {"real", "inside-link"}
    with pytest.raises(UnknownRun):
        b.run_dir("escape")
    for path in PAGES:
        text = _page_text(dash_app, client, path, "?run=escape")
        assert "unknown run" in text.lower(), (path, text[:300])
    assert client.get("/export?run=escape").status_code == 404
    store = b.store("real", wait=30)
    assert store is not None
    assert set(store.scalars().get_column("source").unique()) == {"rank0.jsonl"}


def test_sec010_links_out_of_the_root_are_named_on_the_runs_page(escape_root, board_root, dash_app, client):
    """The folder linking out of the root is said on the runs page (its target, not read, what to do), and
    a root of only such links says why it has no run (before: silently "No runs found")."""
    b = board_root(escape_root)
    assert b.scan().outside == {"escape": str((escape_root.parent / "outside").resolve())}
    text = _page_text(dash_app, client, "/", "")
    assert "1 folder under" in text and "is a link out of the rollout root: not read as a run" in text
    assert "escape → " in text
    only_links = escape_root.parent / "links-only"
    only_links.mkdir()
    (only_links / "escape").symlink_to(escape_root.parent / "outside", target_is_directory=True)
    b = board_root(only_links)
    assert b.scan().runs == {} and "is a link out of it, which the board does not follow" in b.scan().trouble
    assert "not read as a run" in _page_text(dash_app, client, "/", "")


def test_sec006_static_routes_do_not_traverse(client):
    """Asset and component-suite URLs with ../ (plain or encoded) never serve a file outside the package."""
    for url in (
        "/assets/../app.py",
        "/assets/%2e%2e/app.py",
        "/assets/..%2fapp.py",
        "/_dash-component-suites/dash/../../app.py",
        "/_dash-component-suites/dash/%2e%2e/%2e%2e/app.py",
        "/_dash-component-suites/dash/dcc/../../../../../../etc/passwd",
        "/_dash-component-suites/os/path.py",
        "/static/../app.py",
    ):
        r = client.get(url)
        assert r.status_code in (400, 404), (url, r.status_code)
        assert b"create_app" not in r.data and b"root:" not in r.data and b"Traceback" not in r.data


def test_sec007_no_stack_trace_to_browsers(client):
    """A callback request that cannot be served (here: for an output that does not exist) answers a plain
    400 without a traceback."""
    body = {
        "output": "nope.children",
        "outputs": {"id": "nope", "property": "children"},
        "inputs": [],
        "state": [],
        "changedPropIds": [],
    }
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 400
    text = r.get_data(as_text=True)
    assert "Traceback" not in text and "File " not in text and ".py" not in text
    assert client.application.debug is False


def test_sec008_run_names_are_text(tmp_path, board_root, client, fixtures_dir):
    """A run whose folder name looks like HTML reaches pages as a plain string, never as markup."""
    root = tmp_path / "root"
    name = "<img src=x onerror=alert(1)>"
    (root / name).mkdir(parents=True)
    shutil.copy(fixtures_dir / "trl-ppo-small" / "rank0.jsonl", root / name / "rank0.jsonl")
    board_root(root)
    text = _render(client, "/reward", "?run=" + quote(name))
    assert "unknown run" not in text.lower()
    # Dash serialises it as a JSON string (children), so the browser renders it as text.
    assert "dangerouslySetInnerHTML" not in text and "DangerouslySetInnerHTML" not in text


def test_sec009_healthz_and_pages_answer_during_ingest(
    tmp_path, board_root, client, fixtures_dir, monkeypatch
):
    """While a run's ingest is under way (held here), /healthz and the run's pages answer at once from the
    last committed state."""
    root = tmp_path / "root"
    (root / "growing").mkdir(parents=True)
    src = (fixtures_dir / "trl-ppo-small" / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    (root / "growing" / "rank0.jsonl").write_bytes(b"".join(src[:80]))
    b = board_root(root, refresh_seconds=0.0)
    b.ingest_now("growing")
    with open(root / "growing" / "rank0.jsonl", "ab") as f:
        f.write(b"".join(src[80:]))

    release = threading.Event()
    real = service.ingest_run

    def held_ingest(*args, **kw):
        release.wait(300)  # until released below: far longer than any answer may take
        return real(*args, **kw)

    monkeypatch.setattr(service, "ingest_run", held_ingest)
    try:
        b.refresh("growing", force=True)
        assert b.status("growing").running
        t0 = time.monotonic()
        assert client.get("/healthz").get_json()["runs"] == 1
        for path in PAGES:
            _render(client, path, "?run=growing")
        store = b.store("growing", wait=0)
        assert time.monotonic() - t0 < 60  # not held: a page waiting for the ingest would take 300 s
        assert store is not None and store.scalars().height == 80
        assert b.status("growing").running, "the ingest should still be held"
    finally:
        release.set()
    wait_until(lambda: not b.status("growing").running, 120, "the held ingest to end")
    assert b.store("growing", wait=0).scalars().height == len(src)
