"""Prompts page in a real browser: list -> one prompt -> token page, and the never-beat preset with Back."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

POEM = "rlloggingboard-eval-poem"


def _url(dash_duo):
    u = urlparse(dash_duo.driver.current_url)
    return u.path, parse_qs(u.query)


def _wait_url(dash_duo, pred, timeout=30):
    WebDriverWait(dash_duo.driver, timeout).until(lambda d: pred(*_url(dash_duo)))


def _click(dash_duo, css):
    el = dash_duo.wait_for_element(css, timeout=30)
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
    el.click()


def test_prompts201_list_to_prompt_to_token_page(dash_duo, dash_app, fixtures_dir):
    """A prompt of the list opens its history, whose grid gets its rows from the server and sorts there on a
    header click; its first response's link opens that response's token page."""
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_page(f"{dash_duo.server_url}/prompts?run={POEM}")
    dash_duo.wait_for_contains_text("#prompts-summary", "128 prompts", timeout=30)
    _click(dash_duo, "#prompts-table .prompts-row-link")
    _wait_url(dash_duo, lambda path, q: path == "/prompts" and "prompt" in q)
    dash_duo.wait_for_element("#prompts-history", timeout=30)
    dash_duo.wait_for_contains_text("#prompts-first", "First response · step 0")
    first_step = "#prompts-history .ag-center-cols-container .ag-row[row-index='0'] .ag-cell[col-id='step']"
    dash_duo.wait_for_text_to_equal(first_step, "0", timeout=30)  # the history's order: step first
    header = "#prompts-history .ag-header-cell[col-id='step']"
    for order in ("ascending", "descending"):  # ascending: the same order; descending: the latest step first
        # a click from script: the header's tooltip, shown after the first click, covers it for the mouse
        label = dash_duo.wait_for_element(header + " .ag-header-cell-label")
        dash_duo.driver.execute_script("arguments[0].click();", label)
        dash_duo.wait_for_element(f"{header}[aria-sort='{order}']", timeout=30)
    dash_duo.wait_for_text_to_equal(first_step, "2300", timeout=30)
    assert not dash_duo.find_element("#prompts-controls").is_displayed()
    _click(dash_duo, "#prompts-first .card-header a")
    _wait_url(dash_duo, lambda path, q: path == "/tokens")
    path, q = _url(dash_duo)
    assert q["run"] == [POEM] and q["sample"][0]
    assert dash_duo.get_logs() == []


def test_prompts202_never_preset_and_back(dash_duo, dash_app, fixtures_dir):
    """The never-beat preset writes view=never without a reload; Back returns to all prompts."""
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_page(f"{dash_duo.server_url}/prompts?run=trl-ppo-small")
    dash_duo.wait_for_element("#prompts-explain", timeout=30)
    dash_duo.wait_for_contains_text("#prompts-pager", "of 400 prompts")
    dash_duo.driver.execute_script("window.__marker = 1;")  # survives only without a reload
    _click(dash_duo, "label[for='prompts-view-never']")
    _wait_url(dash_duo, lambda path, q: q.get("view") == ["never"])
    dash_duo.wait_for_contains_text("#prompts-pager", "of 101 prompts")
    assert dash_duo.driver.execute_script("return window.__marker;") == 1
    dash_duo.driver.back()
    _wait_url(dash_duo, lambda path, q: "view" not in q)
    dash_duo.wait_for_contains_text("#prompts-pager", "of 400 prompts")
    WebDriverWait(dash_duo.driver, 10).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#prompts-view-all").is_selected()
    )
    assert dash_duo.get_logs() == []
