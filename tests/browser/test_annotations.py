"""Annotations in a real browser (issue 38): label the selected response with a note, see the label column,
filter by label through the URL (and Back), mark a token span with a click and a shift-click; a note that
holds markup stays text on every page that shows it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from dash.testing.wait import until
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from data.store import sample_id

RUN = "trl-ppo-small"
SCRIPT_NOTE = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"


@pytest.fixture
def board(board_root, fixtures_dir, tmp_path):
    """The app on the fixtures with this test's own cache (stores and annotations)."""
    return board_root(fixtures_dir, cache_dir=tmp_path / "cache")


def query(dash_duo) -> dict:
    return parse_qs(urlsplit(dash_duo.driver.current_url).query)


def _choose(dash_duo, dropdown_id: str, text: str) -> None:
    dash_duo.find_element(f"#{dropdown_id}").click()
    xpath = f"//*[contains(@class,'dash-dropdown-option') and normalize-space()='{text}']"
    until(lambda: dash_duo.driver.find_elements(By.XPATH, xpath), timeout=10)
    dash_duo.driver.find_elements(By.XPATH, xpath)[-1].click()


def _label_cells(dash_duo) -> dict:
    """``{row index: label text}`` of the rows drawn (one snapshot)."""
    got = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll('.ag-center-cols-container .ag-row')].map(r => {"
        "  const c = r.querySelector(\"[col-id='label']\");"
        "  return [Number(r.getAttribute('row-index')), c ? c.textContent : null];"
        "});"
    )
    return dict(map(tuple, got))


def test_annotations201_label_note_column_filter_and_back(dash_duo, dash_app, board):
    """Label the selected response with a markup note: the status and the list say so (the note as text,
    no script run), the row's label cell shows it; label= filters the grid to it, and Back undoes it."""
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=3")
    until(lambda: len(_label_cells(dash_duo)) == 16, timeout=30)
    dash_duo.driver.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row .ag-cell")[0].click()
    until(lambda: "sample" in query(dash_duo), timeout=30)
    sample = query(dash_duo)["sample"][0]
    _choose(dash_duo, "responses-ann-label", "repetition")
    dash_duo.find_element("#responses-ann-note").send_keys(SCRIPT_NOTE)
    dash_duo.find_element("#responses-ann-save").click()
    dash_duo.wait_for_contains_text("#responses-ann-status", "Labelled 'repetition'", timeout=30)
    dash_duo.wait_for_contains_text("#responses-ann-list", SCRIPT_NOTE, timeout=30)
    until(lambda: "repetition" in _label_cells(dash_duo).values(), timeout=30)
    assert dash_duo.driver.execute_script("return window.__pwned === undefined")

    _choose(dash_duo, "responses-ann-filter", "repetition")
    until(lambda: query(dash_duo).get("label") == ["repetition"], timeout=30)
    until(lambda: list(_label_cells(dash_duo).values()) == ["repetition"], timeout=30)
    assert query(dash_duo).get("sample") == [sample]  # the selected response stays selected

    dash_duo.driver.back()
    until(lambda: "label" not in query(dash_duo), timeout=30)
    until(lambda: len(_label_cells(dash_duo)) == 16, timeout=30)
    until(lambda: dash_duo.find_element("#responses-ann-filter").text.strip() == "any", timeout=30)
    assert dash_duo.driver.execute_script("return window.__pwned === undefined")
    assert dash_duo.get_logs() == []


def test_annotations202_token_span_marked_and_kept(dash_duo, dash_app, board):
    """A click and a shift-click on the strip give the span's positions; labelled, its tokens are marked on
    the strip, and still are when the page is opened again; the markup note stays text."""
    sid = sample_id("rank0.jsonl", 104)
    dash_duo.start_server(dash_app)
    url = f"{dash_duo.server_url}/tokens?run={RUN}&sample={sid}"
    dash_duo.driver.get(url)
    until(lambda: len(dash_duo.driver.find_elements(By.CSS_SELECTOR, "#tokens-strip span[data-pos]")) > 6, 30)
    tokens = dash_duo.driver.find_elements(By.CSS_SELECTOR, "#tokens-strip span[data-pos]")
    tokens[2].click()
    ActionChains(dash_duo.driver).key_down(Keys.SHIFT).click(tokens[5]).key_up(Keys.SHIFT).perform()
    until(lambda: dash_duo.find_element("#tokens-ann-to").get_attribute("value") == "5", timeout=10)
    assert dash_duo.find_element("#tokens-ann-from").get_attribute("value") == "2"
    dash_duo.find_element("#tokens-ann-note").send_keys(SCRIPT_NOTE)
    dash_duo.find_element("#tokens-ann-save").click()
    dash_duo.wait_for_contains_text("#tokens-ann-status", "(tokens 2–5)", timeout=30)

    def marked():
        spans = dash_duo.driver.find_elements(By.CSS_SELECTOR, "#tokens-strip span.token-ann")
        return [s.get_attribute("data-pos") for s in spans]

    until(lambda: marked() == ["2", "3", "4", "5"], timeout=30)
    dash_duo.driver.get(url)  # opened again: read back from the annotations file
    until(lambda: marked() == ["2", "3", "4", "5"], timeout=30)
    dash_duo.wait_for_contains_text("#tokens-ann-list", SCRIPT_NOTE, timeout=30)
    assert dash_duo.driver.execute_script("return window.__pwned === undefined")
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=13&sample={sid}")
    dash_duo.wait_for_contains_text("#responses-ann-list", SCRIPT_NOTE, timeout=30)
    assert dash_duo.driver.execute_script("return window.__pwned === undefined")
    assert dash_duo.get_logs() == []


def test_annotations203_a_page_load_asks_the_server_nothing_for_the_controls(
    dash_duo, dash_app, board, monkeypatch
):
    """A responses page load asks the server nothing for the label filter, the annotation control or the
    run picker (the page is built with them set); selecting a row lists its annotations, a sort does not
    ask again, and a label chosen in the filter is written into the URL by the server."""
    import io
    import json
    import threading

    outputs: list[str] = []
    lock = threading.Lock()
    inner = dash_app.server.wsgi_app

    def counting(environ, start_response):
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO", "").endswith(
            "update-component"
        ):
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            with lock:
                outputs.append(json.loads(body)["output"])
            environ["wsgi.input"] = io.BytesIO(body)
        return inner(environ, start_response)

    monkeypatch.setattr(dash_app.server, "wsgi_app", counting)  # put back after the test
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=3")
    until(lambda: len(_label_cells(dash_duo)) == 16, timeout=30)
    until(lambda: any("getRowsResponse" in o for o in outputs), timeout=30)
    dash_duo.wait_for_contains_text("#responses-ann-list", "Select a response to label it.", timeout=30)
    with lock:
        loaded = list(outputs)
    assert not [o for o in loaded if "ann-status" in o or "app-location.href" in o], loaded
    assert not [o for o in loaded if "@" in o and "app-page-url" in o], loaded  # the label filter's
    dash_duo.driver.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row .ag-cell")[0].click()
    until(lambda: any("ann-status" in o for o in outputs), timeout=30)
    dash_duo.wait_for_contains_text("#responses-ann-list", "No annotations yet.", timeout=30)
    with lock:
        asked = sum("ann-status" in o for o in outputs)
    before = query(dash_duo)
    dash_duo.find_element(".ag-header-cell[col-id='reward'] .ag-header-cell-label").click()  # a sort
    until(lambda: query(dash_duo) != before, timeout=30)
    _choose(dash_duo, "responses-ann-filter", "repetition")
    until(lambda: query(dash_duo).get("label") == ["repetition"], timeout=30)
    with lock:
        assert sum("ann-status" in o for o in outputs) == asked  # neither the sort nor the filter
    assert dash_duo.get_logs() == []
