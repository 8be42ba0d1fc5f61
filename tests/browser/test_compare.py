"""Compare page in a real browser: two fixture runs side by side, controls write the URL and a copied URL
gives the same view, Back/Forward restore earlier views, and a click on a shared prompt opens both runs'
responses with their word diff."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PPO, GRPO = "trl-ppo-small", "trl-grpo-small"
TWO = f"/compare?run={PPO}&run={GRPO}"


def _query(dash_duo) -> dict:
    return parse_qs(urlparse(dash_duo.driver.current_url).query)


def _wait_url(dash_duo, pred, timeout=30):
    WebDriverWait(dash_duo.driver, timeout).until(lambda d: pred(_query(dash_duo)))


def _open(dash_duo, dash_app, path):
    dash_duo.start_server(dash_app, navigate=False)
    dash_duo.wait_for_page(f"{dash_duo.server.url.rstrip('/')}{path}")


def _settled(dash_duo):
    """Wait until every section is drawn (the curves above the prompt lists come in later and push them
    down: a click during that would land on something else)."""
    dash_duo.wait_for_element("#compare-curves .js-plotly-plot", timeout=30)
    dash_duo.wait_for_element("#compare-solved-a .list-group-item", timeout=30)
    dash_duo.wait_for_element("#compare-scatter g.points path", timeout=30)
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-dash-is-loading='true']")
    )


def _still(dash_duo):
    """Wait until the page has stopped scrolling (the opened prompt scrolls itself into view)."""
    seen = []

    def same(d):
        seen.append(d.execute_script("return window.scrollY;"))
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    WebDriverWait(dash_duo.driver, 10, poll_frequency=0.2).until(same)


def _click(dash_duo, element):
    """Scroll ``element`` to the middle of the viewport and click it there, once nothing moves. ``element``
    may be a CSS selector: it is then found again right before each try, so that a card the page drew
    again in the meantime (the runs page redraws after a tick) is clicked, not its stale element."""
    for attempt in range(3):
        _still(dash_duo)
        el = dash_duo.driver.find_element(By.CSS_SELECTOR, element) if isinstance(element, str) else element
        try:
            dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
            _still(dash_duo)
            ActionChains(dash_duo.driver).move_to_element(el).click().perform()
            return
        except StaleElementReferenceException:
            if not isinstance(element, str) or attempt == 2:
                raise


def _selected(dash_duo, input_id) -> bool:
    return dash_duo.driver.find_element(By.CSS_SELECTOR, f"input[id='{input_id}']").is_selected()


def _radio(dash_duo, group: str, value: str):
    """Click the label of the radio item of ``group`` whose value is ``value`` (dbc.RadioItems)."""
    inputs = dash_duo.driver.find_elements(By.CSS_SELECTOR, f"#{group} input")
    target = next(i for i in inputs if i.get_attribute("value") == value)
    dash_duo.driver.find_element(By.CSS_SELECTOR, f"label[for='{target.get_attribute('id')}']").click()
    return target.get_attribute("id")


def test_compare101_two_runs_side_by_side(dash_duo, dash_app, fixtures_dir):
    """Both runs are in the summary table, every curve card draws one line per run in the run's colour,
    the agreement checks of both TRL runs agree, and both distributions are drawn on shared bins."""
    _open(dash_duo, dash_app, TWO)
    dash_duo.wait_for_contains_text("#compare-summary", PPO, timeout=30)
    rows = dash_duo.driver.find_elements(By.CSS_SELECTOR, "#compare-summary tbody tr")
    assert [r.text.split()[0] for r in rows] == [PPO, GRPO]
    dash_duo.wait_for_element("#compare-curves .js-plotly-plot", timeout=30)
    names = dash_duo.driver.execute_script(
        "const gd = document.querySelector('#compare-curves .js-plotly-plot');"
        "return gd.data.filter(t => t.showlegend !== false).map(t => [t.name, t.line.color]);"
    )
    assert names == [[PPO, "#0072B2"], [GRPO, "#D55E00"]]
    dash_duo.wait_for_contains_text("#compare-agreement-0", "objective/kl", timeout=30)
    for i in (0, 1):
        text = dash_duo.find_element(f"#compare-agreement-{i}").text
        assert "agrees" in text and "disagrees" not in text and "not comparable" not in text
    dash_duo.wait_for_contains_text("#compare-pair-notes", "100 shared prompts", timeout=30)
    traces = dash_duo.driver.execute_script(
        "return document.querySelector('#compare-dist .js-plotly-plot').data.map(t => t.name);"
    )
    assert traces == [f"{PPO} · step 25", f"{GRPO} · step 25"]
    assert dash_duo.get_logs() == []


def test_compare102_url_round_trip_and_back_forward(dash_duo, dash_app, fixtures_dir):
    """The x-axis and band controls write the URL without a reload; opening that URL afresh shows the same
    controls; Back and Forward restore each view."""
    _open(dash_duo, dash_app, TWO)
    dash_duo.wait_for_contains_text("#compare-summary", PPO, timeout=30)
    dash_duo.driver.execute_script("window.__marker = 1;")
    samples = _radio(dash_duo, "compare-x", "samples")
    _wait_url(dash_duo, lambda q: q.get("x") == ["samples"])
    band = _radio(dash_duo, "compare-band", "p25-p75")
    _wait_url(dash_duo, lambda q: q.get("band") == ["p25-p75"] and q.get("x") == ["samples"])
    assert dash_duo.driver.execute_script("return window.__marker;") == 1
    assert _query(dash_duo)["run"] == [PPO, GRPO]
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: (
            d.execute_script(
                "const gd = document.querySelector('#compare-curves .js-plotly-plot');"
                "return gd && gd.layout.xaxis.title.text;"
            )
            == "responses seen (cumulative)"
        )
    )

    url = dash_duo.driver.current_url
    dash_duo.driver.get(url)  # a colleague opening the copied URL
    dash_duo.wait_for_contains_text("#compare-summary", PPO, timeout=30)
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: _selected(dash_duo, samples) and _selected(dash_duo, band)
    )

    dash_duo.driver.back()
    _wait_url(dash_duo, lambda q: q.get("x") == ["samples"] and "band" not in q)
    dash_duo.driver.back()
    _wait_url(dash_duo, lambda q: "x" not in q and "band" not in q and q.get("run") == [PPO, GRPO])
    WebDriverWait(dash_duo.driver, 30).until(lambda d: not _selected(dash_duo, samples))
    dash_duo.driver.forward()
    _wait_url(dash_duo, lambda q: q.get("x") == ["samples"])
    WebDriverWait(dash_duo.driver, 30).until(lambda d: _selected(dash_duo, samples))
    assert dash_duo.get_logs() == []


def test_compare103_paired_prompt_click_opens_both_responses(dash_duo, dash_app, fixtures_dir):
    """A click on a point of the paired scatter puts its prompt in the URL and opens both runs' responses
    to it side by side, in view, with the word diff of the best response of each; Close hides them."""
    _open(dash_duo, dash_app, TWO)
    _settled(dash_duo)
    # The drag layer covers the points: move onto one and click there (Plotly takes the closest point).
    _click(dash_duo, dash_duo.driver.find_elements(By.CSS_SELECTOR, "#compare-scatter g.points path")[0])
    _wait_url(dash_duo, lambda q: q.get("prompt") is not None)
    picked = _query(dash_duo)["prompt"][0]
    dash_duo.wait_for_element("#compare-responses-a pre", timeout=30)
    dash_duo.wait_for_element("#compare-responses-b pre", timeout=30)
    assert PPO in dash_duo.find_element("#compare-responses-a").text
    assert GRPO in dash_duo.find_element("#compare-responses-b").text
    diff = dash_duo.find_element("#compare-diff")
    assert f"only in {PPO}" in diff.text and f"only in {GRPO}" in diff.text
    WebDriverWait(dash_duo.driver, 30).until(  # scrolled into view
        lambda d: (
            0
            <= d.execute_script(
                "return document.querySelector('#compare-opened-body').getBoundingClientRect().top;"
            )
            < d.execute_script("return window.innerHeight;")
        )
    )
    matches = dash_duo.driver.execute_script(
        "return document.querySelector('#compare-scatter .js-plotly-plot')._fullData[0].customdata.map(c => c[0]);"
    )
    assert picked in matches  # a shared prompt (several may sit on the point clicked)
    _click(dash_duo, dash_duo.find_element("#compare-close"))
    _wait_url(dash_duo, lambda q: "prompt" not in q)
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, "#compare-responses-a")
    )
    assert dash_duo.get_logs() == []


def test_compare104_solved_list_item_opens_the_prompt(dash_duo, dash_app, fixtures_dir):
    """An item of "solved by A, not by B" opens that prompt: both runs' responses, A's reward above τ."""
    _open(dash_duo, dash_app, TWO)
    _settled(dash_duo)
    item = dash_duo.find_element("#compare-solved-a .list-group-item")
    preview = item.text.splitlines()[0]
    _click(dash_duo, item)
    _wait_url(dash_duo, lambda q: q.get("prompt") is not None)
    dash_duo.wait_for_contains_text("#compare-opened-body", preview, timeout=30)
    dash_duo.wait_for_element("#compare-responses-b pre", timeout=30)
    assert dash_duo.get_logs() == []


def test_compare105_runs_page_ticks_open_the_compare_page(dash_duo, dash_app, fixtures_dir):
    """On the runs page each card shows its headline figures and a reward sparkline; ticking two runs
    enables the compare link, which opens the compare page with both runs in the page's order."""
    _open(dash_duo, dash_app, "/")
    dash_duo.wait_for_element(f"#runs-spark-{PPO} .js-plotly-plot", timeout=30)
    # (The table may be drawn again meanwhile, a first ingest done: found afresh until it reads so.)
    dash_duo.wait_for_text_to_equal(f"#runs-headline-0-{GRPO}", "1.781", timeout=30)  # last step's mean
    assert "disabled" in dash_duo.find_element("#runs-compare").get_attribute("class")
    for run in (PPO, GRPO):
        _click(dash_duo, f'input[id*=\'"run":"{run}"\']')
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: "disabled" not in d.find_element(By.CSS_SELECTOR, "#runs-compare").get_attribute("class")
    )
    assert dash_duo.find_element("#runs-compare").text == "Compare the 2 runs ticked"
    _click(dash_duo, "#runs-compare")
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/compare")
    assert _query(dash_duo)["run"] == [GRPO, PPO]  # the runs page lists runs by name
    dash_duo.wait_for_contains_text("#compare-summary", PPO, timeout=30)
    assert dash_duo.get_logs() == []
