"""Snapshots in a real browser: the file opened from disk with the network off draws its figures and strip,
fetches nothing and runs no model text; the navbar's "Download snapshot" link answers the page's file."""

from __future__ import annotations

import datetime as dt

import requests
from selenium.webdriver.common.by import By

from api.snapshot import render
from tests.unit.test_snapshot import CLOSE, IMG, SCRIPT, hostile_answer
from tests.waiting import wait_until


def _open_offline(br, path):
    """Open ``path`` (file://) with the browser's network switched off (DevTools), and wait for its plots."""
    driver = br.driver
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    driver.get(path.as_uri())
    want = driver.execute_script("return document.querySelectorAll('.snap-plot').length")
    wait_until(
        lambda: driver.execute_script("return document.querySelectorAll('.js-plotly-plot').length") == want,
        30,
        f"{want} figures drawn",
    )
    return driver


def _fetched(driver) -> list[str]:
    """What the page loaded besides itself (Resource Timing): URLs of scripts, styles, images, fonts, XHR."""
    return driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")


def test_snapshot101_hostile_view_offline(dash_br, tmp_path):
    """A hand-built answer whose model text is markup: its figure draws its bars, the strip's spans are
    there with the <img> as text, the table shows <script>alert(1)</script> as text, nothing ran
    (window.__pwned, no alert), nothing was fetched, and the console is clean (a fetch the CSP blocked would
    be logged there)."""
    path = tmp_path / "hostile.html"
    path.write_text(
        render(hostile_answer(), "tokens", "/tokens?run=r", dt.datetime.now(dt.UTC)), encoding="utf-8"
    )
    d = _open_offline(dash_br, path)
    assert d.execute_script("return document.getElementById('snap-fig-0').data.length") == 1
    assert len(d.find_elements(By.CSS_SELECTOR, "#snap-fig-0 .trace.bars .point")) == 3
    spans = d.find_elements(By.CSS_SELECTOR, ".token-strip > span")
    assert [s.get_attribute("textContent") for s in spans][:3] == ["Hello", IMG, " world"]
    cells = [c.get_attribute("textContent") for c in d.find_elements(By.CSS_SELECTOR, ".snap-table td")]
    assert SCRIPT in cells and f"{CLOSE} 1" in cells
    assert d.execute_script("return window.__pwned === undefined && document.images.length === 0")
    assert [s.get_attribute("type") for s in d.find_elements(By.TAG_NAME, "script")] == [
        "application/json",
        "",
        "",
    ]
    assert _fetched(d) == []
    assert dash_br.get_logs() == []


def test_snapshot102_runs_page_offline(dash_br, client, fixtures_dir, tmp_path):
    """The runs page's download opened from disk, offline: each run's sparkline drawn with its points, its
    rows in the table, nothing fetched over http or https."""
    wait_until(
        lambda: all(r["state"] == "ready" for r in client.get("/api/v1/runs").get_json()["rows"]),
        120,
        "runs read",
    )
    r = client.get("/snapshot/runs")
    assert r.status_code == 200
    path = tmp_path / "runs.html"
    path.write_bytes(r.get_data())
    d = _open_offline(dash_br, path)
    answer = client.get("/api/v1/runs").get_json()
    for i, (fid, fig) in enumerate(answer["figures"].items()):
        # (the figure JSON holds typed arrays: what Plotly decoded and drew is in _fullData)
        drawn = d.execute_script(
            f"const t = document.getElementById('snap-fig-{i}')._fullData[0]; return [Array.from(t.x), Array.from(t.y)]"
        )
        assert drawn == [fig["traces"][0]["x"], fig["traces"][0]["y"]], fid
    rows = d.find_elements(By.CSS_SELECTOR, ".snap-table tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == [x["run"] for x in answer["rows"]]
    assert not [u for u in _fetched(d) if u.startswith(("http:", "https:"))]
    assert dash_br.get_logs() == []


def test_snapshot103_navbar_link_follows_the_page(dash_duo, dash_app, fixtures_dir):
    """ "Download snapshot" in the navbar points at the page's /snapshot/<view>?<query>: on the reward page
    (where its answer is on this branch; else the runs page) a click works and its href answers 200
    text/html named after the run; on a page with no answer the link is hidden."""
    import dash

    from api.registry import modules

    dash_duo.start_server(dash_app)
    views = {m.PATH: n for n, m in modules().items()}
    path, query = ("/reward", "?run=trl-ppo-small") if "/reward" in views else ("/", "")
    dash_duo.wait_for_element("#app-snapshot", timeout=30)
    dash_duo.driver.get(dash_duo.server_url + path + query)
    dash_duo.wait_for_style_to_equal("#app-snapshot", "display", "inline-block", timeout=30)
    link = dash_duo.find_element("#app-snapshot")
    assert link.text == "Snapshot" and link.get_attribute("aria-label") == "Download snapshot"
    href = link.get_attribute("href")
    assert href == f"{dash_duo.server_url}/snapshot/{views[path]}{query}"
    link.click()
    r = requests.get(href, timeout=120)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    name = "trl-ppo-small" if query else "all"
    assert f'filename="{views[path]}-{name}-' in r.headers["Content-Disposition"]
    assert "trl-ppo-small" in r.text
    without = [p["path"] for p in dash.page_registry.values() if p["path"] not in views]
    if without:
        dash_duo.driver.get(dash_duo.server_url + without[0])
        dash_duo.wait_for_style_to_equal("#app-snapshot", "display", "none", timeout=30)
    assert dash_duo.get_logs() == []


def _hostile_run(root):
    """A run of one response whose text and tokens are markup (prompt, response, tokens), in the contract."""
    import json

    script, img = (
        "</script><script>window.__pwned='run'</script>",
        "<img src=x onerror=\"window.__pwned='tok'\">",
    )
    record = {
        "prompt": f"Say {script}",
        "response": f"{script} {img}",
        "reward": 1.0,
        "step": 1,
        "response_tokens": [script, " ", img, "<|endoftext|>"],
        "logprobs": [-0.5, -1.0, -2.0, -0.1],
        "ref_logprobs": [-0.6, -1.5, -1.0, -0.1],
    }
    (root / "html-run").mkdir(parents=True)
    (root / "html-run" / "data.jsonl").write_text(json.dumps(record) + "\n")
    return img


def test_snapshot104_pages_snapshots_offline(dash_br, client, board_root, tmp_path):
    """The reward page's and a token page's downloads, of a run whose model text is markup, opened offline:
    every figure drawn, the strip's spans there with the <img> as text, nothing ran, nothing fetched."""
    from data.store import sample_id

    urls = {
        "reward": "/reward?run=html-run",
        "tokens": f"/tokens?run=html-run&sample={sample_id('data.jsonl', 1)}",
    }
    img = _hostile_run(tmp_path / "root")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    logs = {}
    for name, url in urls.items():
        path, _, query = url.partition("?")
        api = wait_until(lambda q=query, n=name: client.get(f"/api/v1/{n}?{q}").get_json(), 120, url)
        r = client.get(f"/snapshot/{name}?{query}")
        assert r.status_code == 200, r.get_data(as_text=True)[:300]
        file = tmp_path / f"{name}.html"
        file.write_bytes(r.get_data())
        d = _open_offline(dash_br, file)
        assert len(d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) == len(api["figures"]), name
        for strip in api["strips"].values():
            texts = [
                s.get_attribute("textContent")
                for s in d.find_elements(By.CSS_SELECTOR, ".token-strip > span")
            ]
            assert img in texts and len(texts) >= len(strip["tokens"])
        assert d.execute_script("return window.__pwned === undefined && document.images.length === 0"), name
        assert _fetched(d) == [], name
        logs[name] = dash_br.get_logs()
    assert logs == {"reward": [], "tokens": []} and dash_br.get_logs() == []
