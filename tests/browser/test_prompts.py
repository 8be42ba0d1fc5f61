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


def test_prompts210_truncated_response_to_its_group_side_by_side(dash_duo, dash_app, fixtures_dir):
    """TRL GRPO's rank0.jsonl:188 (step 24, group 93; cut at 20 tokens, ends_with_eos false): its token page
    says "truncated"; "its group" opens the group's four completions side by side, each a card with its
    reward, advantage and end, the cut one badged; its card's link opens its token page again; the
    responses page's selected row links to the same group; no console errors."""
    from data.store import sample_id

    sid = sample_id("rank0.jsonl", 188)
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_page(f"{dash_duo.server_url}/tokens?run=trl-grpo-small&sample={sid}")
    dash_duo.wait_for_contains_text("#tokens-end", "truncated: no end token", timeout=30)
    _click(dash_duo, "#tokens-group")
    _wait_url(
        dash_duo, lambda path, q: path == "/prompts" and q.get("step") == ["24"] and q.get("group") == ["93"]
    )
    dash_duo.wait_for_element("#prompts-groups-0-card-3", timeout=30)
    assert not dash_duo.driver.find_elements(By.CSS_SELECTOR, "#prompts-groups-0-card-4")
    dash_duo.wait_for_contains_text("#prompts-groups-0", "step 24 · group 93 · 4 responses")
    cards = dash_duo.driver.find_elements(By.CSS_SELECTOR, "#prompts-groups .card")
    assert len(cards) == 4 and all("reward" in c.text and "advantage" in c.text for c in cards)
    cut = [c for c in cards if "rank0.jsonl:188" in c.text]
    assert len(cut) == 1 and "truncated" in cut[0].text
    tops = {c.location["y"] for c in cards}
    assert len(tops) == 1  # side by side: one row at 1400 px
    cut[0].find_element(By.CSS_SELECTOR, "a").click()
    _wait_url(dash_duo, lambda path, q: path == "/tokens" and q.get("sample") == [sid])
    dash_duo.wait_for_page(f"{dash_duo.server_url}/responses?run=trl-grpo-small&step=24&sample={sid}")
    link = dash_duo.wait_for_element("#responses-open-group", timeout=30)
    assert parse_qs(urlparse(link.get_attribute("href")).query)["group"] == ["93"]
    assert dash_duo.get_logs() == []
