"""Responses page in a real browser: a filtered URL, sorting by a header, paging by scrolling, selecting a
row, opening the token page, invalid regex, Back/Forward."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from dash.testing.wait import until
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

RUN = "trl-ppo-small"
# Any of the grid's row containers: step and reward are pinned on the left, the previews on the right.
CELLS = ".ag-row [col-id='{}']"


def query(dash_duo) -> dict:
    return parse_qs(urlsplit(dash_duo.driver.current_url).query)


def cell_values(dash_duo, col) -> list[float]:
    """Values of a numeric column in the rendered rows, in row-index order (one snapshot: the grid
    re-renders rows while it loads, so elements are not held across calls)."""
    cells = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll('.ag-row')].map(r => {"
        "  const c = r.querySelector(`[col-id='${arguments[0]}']`);"
        "  return [Number(r.getAttribute('row-index')), c ? c.textContent : ''];"
        "});",
        col,
    )
    return [float(text) for _, text in sorted(cells) if text]


def test_responses201_filter_sort_select_and_open(dash_duo, dash_app, fixtures_dir):
    """A filtered URL shows its rows; a header click sorts on the server and goes into the URL; a row click
    shows its texts; the row's id opens the token page."""
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=3&reward_min=1.5")
    dash_duo.wait_for_text_to_equal("#responses-count", "11", timeout=30)
    dash_duo.wait_for_element(CELLS.format("reward"))
    # (the cells exist before the grid has written their text: wait for drawn values)
    until(lambda: len(v := cell_values(dash_duo, "reward")) == 11 and min(v) >= 1.5, timeout=30)
    assert dash_duo.find_element("#responses-reward-min").get_attribute("value") == "1.5"

    dash_duo.find_element(".ag-header-cell[col-id='kl_mean'] .ag-header-cell-label").click()
    until(lambda: query(dash_duo).get("sort") == ["kl_mean"], timeout=30)
    # All 11 rows, sorted (while the grid redraws, no row is drawn: an empty column is sorted too).
    until(
        lambda: len(v := cell_values(dash_duo, "kl_mean")) == 11 and v == sorted(v, reverse=True), timeout=30
    )

    dash_duo.driver.find_elements(By.CSS_SELECTOR, CELLS.format("reward"))[0].click()
    dash_duo.wait_for_element("#responses-text-response", timeout=30)
    selected = query(dash_duo)["sample"][0]
    assert dash_duo.find_element("#responses-text-prompt").text

    link = dash_duo.find_element(".ag-pinned-left-cols-container .ag-row[row-index='0'] a")
    sid = parse_qs(urlsplit(link.get_attribute("href")).query)["sample"][0]
    assert sid == selected  # the clicked row is row 0
    assert link.text == dash_duo.find_element("#responses-text-where").text  # its file:line
    assert dash_duo.get_logs() == []
    dash_duo.driver.execute_script("window.__rlbSamePage = true;")  # gone if the link reloads the page
    link.click()
    until(lambda: urlsplit(dash_duo.driver.current_url).path == "/tokens", timeout=30)
    dash_duo.wait_for_element("#tokens-strip", timeout=30)
    assert dash_duo.driver.execute_script("return window.__rlbSamePage === true;")
    q = query(dash_duo)
    assert q["run"] == [RUN] and q["sample"] == [sid]
    assert q["back"] == [f"run={RUN}&step=3&sort=kl_mean&reward_min=1.5&sample={sid}"]
    assert dash_duo.get_logs() == []


def _count(dash_duo) -> str | None:
    """The responses count as shown now (None before the page has one)."""
    return dash_duo.driver.execute_script(
        "const e = document.querySelector('#responses-count'); return e ? e.textContent.trim() : null;"
    )


def test_responses202_scroll_pages_regex_and_back_forward(dash_duo, dash_app, fixtures_dir):
    """Scrolling fetches later blocks; an invalid regex says so; Back/Forward restore filters."""
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=all&sort=step&order=asc")
    dash_duo.wait_for_text_to_equal("#responses-count", "400", timeout=30)
    dash_duo.wait_for_element(CELLS.format("step"))
    viewport = dash_duo.find_element(".ag-body-viewport")
    last = ".ag-pinned-left-cols-container .ag-row[row-index='399'] [col-id='step']"

    def scrolled_to_the_end():
        # Blocks of 100 rows are fetched as the viewport reaches them; the grid grows as they arrive.
        return dash_duo.driver.execute_script(
            "arguments[0].scrollTop = arguments[0].scrollHeight;"
            "const cell = document.querySelector(arguments[1]); return cell ? cell.textContent : '';",
            viewport,
            last,
        )

    until(scrolled_to_the_end, timeout=30, poll=0.3)
    assert dash_duo.find_element(last).text == "25"

    box = dash_duo.find_element("#responses-q")
    box.send_keys("(unclosed", Keys.ENTER)
    dash_duo.wait_for_contains_text("#responses-q-error", "unclosed group", timeout=30)
    until(lambda: query(dash_duo).get("q") == ["(unclosed"], timeout=30)
    assert dash_duo.find_element("#responses-count").text == "400"  # not applied

    box = dash_duo.find_element("#responses-reward-min")
    box.send_keys("2", Keys.ENTER)
    until(lambda: query(dash_duo).get("reward_min") == ["2"], timeout=30)
    # Read in the page (the count is redrawn as the filter applies: a found element can go stale).
    until(lambda: _count(dash_duo) not in ("400", None), timeout=30)
    filtered = _count(dash_duo)

    dash_duo.driver.back()
    until(lambda: "reward_min" not in query(dash_duo), timeout=30)
    dash_duo.wait_for_text_to_equal("#responses-count", "400", timeout=30)
    assert dash_duo.find_element("#responses-reward-min").get_attribute("value") == ""
    dash_duo.driver.forward()
    dash_duo.wait_for_text_to_equal("#responses-count", filtered, timeout=30)
    assert dash_duo.find_element("#responses-reward-min").get_attribute("value") == "2"
    assert dash_duo.get_logs() == []


def test_responses203_bad_url_values_give_notices_and_double_click_opens(dash_duo, dash_app, fixtures_dir):
    """Malformed parameters fall back to defaults with a visible notice, the page still works, and a
    double-clicked row opens on the token page."""
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=x&kl_max=abc")
    dash_duo.wait_for_contains_text("#responses-notices", "Ignored step='x'", timeout=30)
    assert "Ignored kl_max='abc': not a number." in dash_duo.find_element("#responses-notices").text
    dash_duo.wait_for_text_to_equal("#responses-count", "16", timeout=30)
    row = ".ag-pinned-left-cols-container .ag-row[row-index='2'] a"
    dash_duo.wait_for_element(row)
    sid = parse_qs(urlsplit(dash_duo.find_element(row).get_attribute("href")).query)["sample"][0]
    assert dash_duo.get_logs() == []
    cell = dash_duo.find_element(".ag-pinned-left-cols-container .ag-row[row-index='2'] [col-id='reward']")
    ActionChains(dash_duo.driver).double_click(cell).perform()
    until(lambda: urlsplit(dash_duo.driver.current_url).path == "/tokens", timeout=30)
    assert query(dash_duo)["sample"] == [sid] and query(dash_duo)["back"] == [f"run={RUN}&sample={sid}"]
    assert dash_duo.get_logs() == []


def test_responses204_fields_of_objects_show_in_their_columns(dash_duo, dash_app, board_root, tmp_path):
    """A run whose lines log the reward per function as an object: the column `rewards.accuracy` shows each
    row's value and sorts (a dot in a field's name is part of the name, not a path into the row)."""
    import json

    run = tmp_path / "root" / "nested"
    run.mkdir(parents=True)
    rows = [
        {"prompt": f"q{i}", "response": "r", "reward": i / 2, "step": 1, "rewards": {"accuracy": i % 3}}
        for i in range(6)
    ]
    (run / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run=nested&step=1&sort=rewards.accuracy")
    dash_duo.wait_for_element(CELLS.format("rewards.accuracy"), timeout=30)
    seen = []  # every snapshot, so a failure says what the grid showed instead
    try:
        until(
            lambda: seen.append(cell_values(dash_duo, "rewards.accuracy")) or seen[-1] == [2, 2, 1, 1, 0, 0],
            30,
        )
    finally:
        print("rewards.accuracy cells, last snapshots:", seen[-3:], dash_duo.driver.current_url)
    assert dash_duo.get_logs() == []


def test_responses205_a_link_click_that_also_selects_its_row_keeps_the_token_page_url(
    dash_duo, dash_app, fixtures_dir
):
    """Clicking the id link of a row that is not selected (the click also selects it) opens the token page
    with its own query, back= included, and it stays (before, the responses page's URL sync ran with the
    token page's URL and wrote its own query over it: /tokens?run=…&sample=… without back=)."""
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=2")
    dash_duo.wait_for_text_to_equal("#responses-count", "16", timeout=30)
    row = ".ag-pinned-left-cols-container .ag-row[row-index='3'] a"
    dash_duo.wait_for_element(row)
    link = dash_duo.find_element(row)
    sid = parse_qs(urlsplit(link.get_attribute("href")).query)["sample"][0]  # the link reads file:line
    assert link.text.startswith("rank") and ".jsonl:" in link.text
    link.click()
    until(lambda: urlsplit(dash_duo.driver.current_url).path == "/tokens", timeout=30)
    dash_duo.wait_for_element("#tokens-strip", timeout=30)
    # Every callback answered: what a late one of the responses page would have written is in.
    until(dash_duo._wait_for_callbacks, timeout=60, msg="Dash's pending callbacks to answer")
    q = query(dash_duo)
    assert urlsplit(dash_duo.driver.current_url).path == "/tokens"
    assert q["sample"] == [sid] and q["back"] == [f"run={RUN}&step=2&sample={sid}"], q
    assert dash_duo.get_logs() == []


def _rect(dash_duo, css):
    """``[left, top, right, bottom]`` of the first element matching ``css`` (None when there is none)."""
    return dash_duo.driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (!e) { return null; }"
        "const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];",
        css,
    )


def _shown(dash_duo, css) -> bool:
    """Whether the element's middle is on screen and not covered by anything else (what a person sees)."""
    return dash_duo.driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (!e) { return false; }"
        "const r = e.getBoundingClientRect(), x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;"
        "if (x < 0 || y < 0 || x > window.innerWidth || y > window.innerHeight) { return false; }"
        "const top = document.elementFromPoint(x, y); return e === top || e.contains(top);",
        css,
    )


def test_responses206_texts_in_view_and_a_row_click_keeps_the_reward(dash_duo, dash_app, fixtures_dir):
    """At 1440 px, without scrolling, the rows show the prompt's and the response's previews on several
    lines (wide, not cut at ~30 characters, the search's matches highlighted) beside the reward, and no
    empty panel takes the width. A click on a row's far-right number opens its texts over the previews,
    in view, with the search's matches marked as text; the reward column stays in view; the × closes the
    texts and unselects the row."""
    dash_duo.driver.set_window_size(1440, 900)
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=25&q=good")
    dash_duo.wait_for_text_to_equal("#responses-count", "10", timeout=30)
    prompt, response = (".ag-row[row-index='0'] [col-id='prompt_preview']",
                        ".ag-row[row-index='0'] [col-id='response_preview']")  # fmt: skip
    dash_duo.wait_for_element(response, timeout=30)
    assert _shown(dash_duo, prompt) and _shown(dash_duo, response)
    assert _rect(dash_duo, response)[2] - _rect(dash_duo, response)[0] >= 300
    assert _rect(dash_duo, prompt)[2] - _rect(dash_duo, prompt)[0] >= 200
    assert dash_duo.find_element("#responses-drawer").get_attribute("hidden") is not None
    grid = _rect(dash_duo, ".ag-root-wrapper")
    assert grid[2] - grid[0] >= 1380  # the whole width: no placeholder beside it
    # The search's matches are highlighted in the previews, as text.
    dash_duo.wait_for_element(f"{response} mark", timeout=30)
    assert _shown(dash_duo, f"{response} mark")
    marks = {
        m.text for m in dash_duo.driver.find_elements(By.CSS_SELECTOR, "[col-id='response_preview'] mark")
    }
    assert marks == {"good"}

    # The last center column in view, partly hidden under the pinned previews: AG Grid scrolls to it.
    def last_in_view():
        return dash_duo.driver.execute_script(
            "const cs = [...document.querySelectorAll('.ag-center-cols-container .ag-row[row-index=\"2\"] .ag-cell')];"
            "const edge = document.querySelector('.ag-pinned-right-cols-container').getBoundingClientRect().left;"
            "const c = cs.filter(c => c.getBoundingClientRect().left < edge).pop(); return c && c.getAttribute('col-id');"
        )

    last = until(last_in_view, timeout=30)
    cell = dash_duo.find_element(f".ag-center-cols-container .ag-row[row-index='2'] [col-id='{last}']")
    left_edge = 3 - cell.size["width"] // 2  # its visible left part: the rest is under the previews
    ActionChains(dash_duo.driver).move_to_element(cell).move_by_offset(left_edge, 0).click().perform()
    until(lambda: "sample" in query(dash_duo), timeout=30)
    dash_duo.wait_for_element("#responses-text-response mark", timeout=30)
    assert _shown(dash_duo, "#responses-text-response")
    marks = [m.text for m in dash_duo.driver.find_elements(By.CSS_SELECTOR, "#responses-text-response mark")]
    assert marks and set(marks) == {"good"}
    assert _shown(dash_duo, ".ag-row[row-index='2'] [col-id='reward']")
    assert _shown(dash_duo, ".ag-header-cell[col-id='reward']")
    where = dash_duo.find_element("#responses-text-where").text
    link = dash_duo.find_element(".ag-pinned-left-cols-container .ag-row[row-index='2'] a")
    assert where == link.text and where.startswith("rank")  # file:line, as in the table

    dash_duo.find_element("#responses-text-close").click()
    until(lambda: "sample" not in query(dash_duo), timeout=30)
    until(lambda: dash_duo.find_element("#responses-drawer").get_attribute("hidden") is not None, timeout=30)
    assert dash_duo.get_logs() == []


def test_responses207_all_steps_search_first_rows_then_its_count(
    dash_duo, dash_app, fixtures_dir, monkeypatch
):
    """A search over every step shows its first matches by reward while the count runs (held here until the
    rows are drawn: on a big run the text index's files take seconds), with the count's progress in the
    summary line; the exact count and mean then replace it, and the progress line is gone for good."""
    import threading
    import time as _time

    from data import responses
    from data.queries import ResponseFilter
    from data.search import engine as search_engine
    from data.search import order as search_order
    from data.search import texts as search_texts
    from data.service import board

    slow, counting = search_engine.search, threading.Event()

    def search(lf, pattern, seconds):
        # The count (its own thread, data.search.engine) is held until the test has seen the first row
        # drawn beside its progress line: a slow count, as on a big run, whatever the machine's load.
        if threading.current_thread().name == "search-count":
            counting.wait(120)
        return slow(lf, pattern, seconds)

    monkeypatch.setattr(search_engine, "CHUNK_FILES", 1)
    monkeypatch.setattr(search_engine, "search", search)
    monkeypatch.setattr(search_texts, "search", search)  # the first block's search too
    responses.clear_caches()
    q = "(?i)the"
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/responses?run={RUN}&step=all&q={q}")
    # (The line is drawn anew as the count's progress moves: read by a wait that retries, not found then read.)
    dash_duo.wait_for_contains_text("#responses-counting", "of 400 responses over all steps read", timeout=30)
    dash_duo.wait_for_element(CELLS.format("reward"), timeout=30)
    assert dash_duo.driver.find_elements(By.CSS_SELECTOR, "#responses-counting")  # rows before the count
    counting.set()  # the count goes on
    until(lambda: len(cell_values(dash_duo, "reward")) >= 5, timeout=30)
    shown = cell_values(dash_duo, "reward")
    assert shown == sorted(shown, reverse=True)
    store = board().store(RUN, wait=30)
    want = search_order.ordered(store, ResponseFilter(q=q), seconds=60.0)
    dash_duo.wait_for_text_to_equal("#responses-count", f"{want.count:,}", timeout=30)
    assert not dash_duo.driver.find_elements(By.CSS_SELECTOR, "#responses-counting")
    _time.sleep(2.0)  # the thing under test: the poll stopped, the line stays as it is meanwhile
    assert dash_duo.find_element("#responses-count").text == f"{want.count:,}"
    assert dash_duo.get_logs() == []


def test_responses220_column_chooser_shows_a_column_and_keeps_it_in_the_url(dash_duo, dash_app, fixtures_dir):
    """On TRL's GRPO run advantage, group_id and end are columns in view at 1400 px (no horizontal scroll);
    choosing "reward gain" in the column chooser shows it and writes cols= into the URL; no console errors."""
    from urllib.parse import parse_qs, urlparse

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    dash_duo.start_server(dash_app)
    dash_duo.wait_for_page(f"{dash_duo.server_url}/responses?run=trl-grpo-small&step=25")
    dash_duo.wait_for_element("#responses-grid .ag-cell[col-id='end']", timeout=30)
    for col in ("advantage", "group_id", "end"):
        cell = dash_duo.find_element(f"#responses-grid .ag-header-cell[col-id='{col}']")
        assert cell.is_displayed() and cell.location["x"] + cell.size["width"] <= 1400
    assert not dash_duo.driver.find_elements(
        By.CSS_SELECTOR, "#responses-grid .ag-header-cell[col-id='reward_gain']"
    )
    dash_duo.find_element("#responses-cols").click()  # Dash 4's dropdown: a list of options to tick
    option = WebDriverWait(dash_duo.driver, 30).until(
        lambda d: next(
            (
                o
                for o in d.find_elements(By.CSS_SELECTOR, "[role='option']")
                if o.text.startswith("reward gain")
            ),
            None,
        )
    )
    option.click()
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: "reward_gain" in parse_qs(urlparse(d.current_url).query).get("cols", [])
    )
    dash_duo.wait_for_element("#responses-grid .ag-header-cell[col-id='reward_gain']", timeout=30)
    assert dash_duo.get_logs() == []
