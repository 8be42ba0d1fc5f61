"""Security headers on every response (X-Content-Type-Options, X-Frame-Options, a Content-Security-Policy
without 'unsafe-inline' or 'unsafe-eval' for scripts), and every page still works under them in Chromium:
what a page draws is there and the console has no error (a CSP violation is one)."""

from __future__ import annotations

import requests

from data.store import sample_id

PAGES = (
    ("/", "#runs-samples-trl-ppo-small"),
    ("/reward?run=trl-ppo-small", "#reward-curve-reward .main-svg"),
    ("/responses?run=trl-ppo-small&step=3", ".ag-row"),
    (
        f"/tokens?run=trl-ppo-small&sample={sample_id('rank1.jsonl', 136)}",
        "#tokens-strip[data-rendered] > span",
    ),
    ("/prompts?run=trl-ppo-small", ".prompts-row-link"),
)


def test_headers001_every_page_works_under_the_policy(dash_duo, dash_app, fixtures_dir):
    """Each page and an asset carry the three headers; each page renders its content with no console error."""
    dash_duo.start_server(dash_app)
    base = dash_duo.server_url
    for path, _ in PAGES:
        for url in (base + path, base + "/assets/app.css"):
            h = requests.get(url, timeout=30).headers
            assert h["X-Content-Type-Options"] == "nosniff" and h["X-Frame-Options"] == "DENY", url
            csp = h["Content-Security-Policy"]
            script_src = next(d for d in csp.split("; ") if d.startswith("script-src "))
            assert "'unsafe-eval'" not in script_src and "'unsafe-inline'" not in script_src, csp
            assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp
    for path, drawn in PAGES:
        dash_duo.wait_for_page(url=base + path, timeout=30)
        dash_duo.wait_for_element(drawn, timeout=30)
        assert dash_duo.get_logs() == [], path
    assert dash_duo.get_logs() == []
