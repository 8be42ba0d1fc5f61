"""The token filter and the drifting-tokens board in a real browser: Apply writes the filter into the URL and
the grid shows exactly the responses computed by hand, each with its token's position; a row's link opens
the token page with that token outlined in the strip; a board row opens the responses holding its token."""

from __future__ import annotations

from urllib.parse import parse_qs, quote, urlparse

from selenium.webdriver.support.ui import WebDriverWait

from tests.unit.test_token_filter import FINAL_DOT, by_hand

RUN = "trl-grpo-small"


def _open(dash_duo, dash_app, path):
    dash_duo.start_server(dash_app, navigate=False)
    dash_duo.wait_for_page(f"{dash_duo.server.url.rstrip('/')}{path}")


def _rows(dash_duo) -> list[dict]:
    """The grid's rows: file:line and the token's position."""
    return dash_duo.driver.execute_script(
        "var out = [];"
        "document.querySelectorAll('#responses-grid .ag-center-cols-container .ag-row').forEach(function (r) {"
        "  var at = r.querySelector('[col-id=\"tok_pos\"]');"
        "  out.push({pos: at ? at.textContent.trim() : null, id: r.getAttribute('row-id')}); });"
        "return out;"
    )


def test_tokfilter201_apply_and_open_at_the_token(dash_duo, dash_app, fixtures_dir):
    """Typing ``^Ġ\\.$`` with k3 >= 5 and Apply: the URL has the four keys, the grid the six responses
    computed by hand with their first such token's position; the first row's link opens the token page at
    that position, outlined in the strip."""
    _open(dash_duo, dash_app, f"/responses?run={RUN}&step=all")
    dash_duo.wait_for_element("#responses-tok-pattern").send_keys(FINAL_DOT)
    dash_duo.find_element("#responses-tok-min").send_keys("5")
    dash_duo.find_element("#responses-tok-apply").click()
    WebDriverWait(dash_duo.driver, 20).until(lambda d: "tok=" in d.current_url)
    query = parse_qs(urlparse(dash_duo.driver.current_url).query)
    assert query["tok"] == [FINAL_DOT] and query["tok_min"] == ["5"] and query["tok_metric"] == ["kl"]
    want = by_hand(fixtures_dir, FINAL_DOT, 5, None)
    WebDriverWait(dash_duo.driver, 30).until(lambda d: len(_rows(dash_duo)) == len(want))
    positions = sorted(int(r["pos"]) for r in _rows(dash_duo))
    assert positions == sorted(p for p, _ in want.values())
    link = dash_duo.find_element("#responses-grid .ag-row a")
    href = link.get_attribute("href")
    pos = int(parse_qs(urlparse(href).query)["pos"][0])
    dash_duo.driver.get(href)
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: d.execute_script(
            f"var s = document.querySelector('#tokens-strip span[data-pos=\"{pos}\"]');"
            "return s !== null && s.classList.contains('token-hl');"
        )
    )
    assert dash_duo.get_logs() == []


def test_tokfilter202_drift_row_opens_its_responses(dash_duo, dash_app, fixtures_dir):
    """The board of steps 1 and 60 (shown as 25) lists ``Ġ.``; its "at step 25" link opens the responses
    of step 25 filtered on exactly that token."""
    _open(dash_duo, dash_app, f"/drift?run={RUN}&a=1&b=60&min_n=2")
    dash_duo.wait_for_element("#drift-board")
    links = dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll('#drift-board tr')).filter(function (tr) {"
        "  var c = tr.querySelector('code'); return c && c.textContent === 'Ġ.'; })"
        ".map(function (tr) { return tr.querySelectorAll('a')[1].getAttribute('href'); });"
    )
    assert len(links) == 1
    query = parse_qs(urlparse(links[0]).query)
    assert query["tok"] == ["^Ġ\\.$"] and query["step"] == ["25"] and query["tok_metric"] == ["log_ratio"]
    assert dash_duo.get_logs() == []


def test_tokfilter203_clear_takes_the_token_columns_away(dash_duo, dash_app, fixtures_dir):
    """Clear filters on a token-filtered view: the URL loses the four keys, and the grid its token columns
    (tok_pos, tok_value, tok_hits) and the filter's inputs their values, without a reload by hand."""
    q = quote(FINAL_DOT)
    _open(dash_duo, dash_app, f"/responses?run={RUN}&step=all&tok={q}&tok_min=5&order=asc")
    dash_duo.wait_for_element('#responses-grid .ag-header-cell[col-id="tok_pos"]', timeout=30)
    dash_duo.find_element("#responses-clear").click()
    WebDriverWait(dash_duo.driver, 20).until(lambda d: "tok" not in d.current_url)
    query = parse_qs(urlparse(dash_duo.driver.current_url).query)
    assert query == {"run": [RUN], "step": ["all"], "order": ["asc"]}  # what Clear keeps
    dash_duo.wait_for_element('#responses-grid .ag-header-cell[col-id="reward"]', timeout=30)
    for col in ("tok_pos", "tok_value", "tok_hits"):
        assert not dash_duo.driver.find_elements("css selector", f'#responses-grid [col-id="{col}"]')
    assert dash_duo.find_element("#responses-tok-pattern").get_attribute("value") == ""
    assert dash_duo.get_logs() == []
