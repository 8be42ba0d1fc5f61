"""Reward page in a real browser: a bar click leads to the responses behind it, controls write the URL,
Back/Forward restore earlier views, and a run without token fields renders with notes."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BARS = "#reward-hist g.trace.bars"


def _query(dash_duo) -> dict:
    return parse_qs(urlparse(dash_duo.driver.current_url).query)


def _wait_url(dash_duo, pred, timeout=30):
    WebDriverWait(dash_duo.driver, timeout).until(lambda d: pred(_query(dash_duo)))


def _open(dash_duo, dash_app, path):
    """Start the app and open ``path`` directly (not the runs page first: it is slower to render)."""
    dash_duo.start_server(dash_app, navigate=False)
    dash_duo.wait_for_page(f"{dash_duo.server.url.rstrip('/')}{path}")


def _bar_paths(dash_duo, trace=0):
    """The bars of ``trace`` (0 the reward, 1 the reference reward) with a visible height, in bar order."""
    dash_duo.wait_for_element(f"{BARS} g.point path", timeout=30)
    bars = dash_duo.driver.find_elements(By.CSS_SELECTOR, BARS)[trace]
    return [p for p in bars.find_elements(By.CSS_SELECTOR, "g.point path") if p.size["height"] > 2]


def _bar_data(dash_duo, trace, k):
    """customdata ``[lo, hi, count]`` and height of the k-th bar of ``trace`` with a visible height."""
    return dash_duo.driver.execute_script(
        "const d = document.querySelector('#reward-hist .js-plotly-plot').data[arguments[0]];"
        "const ks = d.y.map((v, i) => [v, i]).filter(p => p[0] > 0).map(p => p[1]);"
        "const k = ks[arguments[1]]; return [d.customdata[k], d.y[k]];",
        trace,
        k,
    )


def _landed_on_responses(dash_duo, count):
    """The click opened the responses page, scrolled to the top, with ``count`` rows listed and the first
    row inside the viewport (not below the fold)."""
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/responses")
    dash_duo.wait_for_text_to_equal("#responses-count", str(count), timeout=30)
    first = ".ag-center-cols-container .ag-row[row-index='0']"
    dash_duo.wait_for_element(first, timeout=30)
    seen = []

    def in_view():  # once the page has settled: it opens at its top (see pages/responses.py)
        seen.append(
            dash_duo.driver.execute_script(
                "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
                "return [r.top, r.bottom, window.innerHeight, window.scrollY];",
                first,
            )
        )
        top, bottom, height, scrolled = seen[-1]
        return 0 <= top and bottom <= height and scrolled == 0

    try:
        WebDriverWait(dash_duo.driver, 5, poll_frequency=0.1).until(lambda _: in_view())
    except TimeoutException:
        raise AssertionError(f"first row / scroll (top, bottom, height, scrollY): {seen[-3:]}") from None
    WebDriverWait(dash_duo.driver, 30).until(  # the grid's block of rows has arrived
        lambda d: (
            d.execute_script("return document.querySelectorAll('.ag-center-cols-container .ag-row').length;")
            == count
        )
    )


def test_reward101_bar_click_opens_its_responses(dash_duo, dash_app, fixtures_dir):
    """Clicking a reward bar of step 5 opens the responses page at once, in view, with exactly the bar's
    responses (run, step and the bar's interval in the URL; as many rows as the bar's height). It used to
    add a link under the chart, below the fold."""
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small&step=5")
    bar = _bar_paths(dash_duo)[0]
    (lo, hi, count), height = _bar_data(dash_duo, 0, 0)
    assert count == height > 0
    ActionChains(dash_duo.driver).move_to_element(bar).click().perform()
    _landed_on_responses(dash_duo, count)
    q = _query(dash_duo)
    assert q["run"] == ["trl-ppo-small"] and q["step"] == ["5"]
    assert float(q["reward_min"][0]) == lo and float(q["reward_max"][0]) == hi
    assert dash_duo.get_logs() == []


def test_reward104_reference_bar_opens_its_responses(dash_duo, dash_app, fixtures_dir):
    """A reference-reward bar opens the responses whose reference reward is in its interval. (A heatmap
    cell's drill is tested through its callback, tests/integration/test_reward.py::test_reward010.)"""
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small&step=20")
    bar = _bar_paths(dash_duo, trace=1)[0]
    (lo, hi, count), height = _bar_data(dash_duo, 1, 0)
    assert count == height > 0
    ActionChains(dash_duo.driver).move_to_element(bar).click().perform()
    _landed_on_responses(dash_duo, count)
    q = _query(dash_duo)
    assert q["step"] == ["20"] and float(q["ref_min"][0]) == lo and float(q["ref_max"][0]) == hi
    assert "reward_min" not in q

    assert dash_duo.get_logs() == []


def test_reward102_controls_write_url_and_back_forward_restore(dash_duo, dash_app, fixtures_dir):
    """Next step and band choice update the URL without reloading; Back and Forward restore both views."""
    _open(dash_duo, dash_app, "/reward?run=trl-grpo-small&step=3")
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 3 · 3 of 25", timeout=30)
    dash_duo.driver.execute_script("window.__marker = 1;")  # survives only without a reload
    dash_duo.find_element("#reward-next").click()
    _wait_url(dash_duo, lambda q: q.get("step") == ["4"])
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 4 · 4 of 25")
    dash_duo.wait_for_contains_text("#reward-hist-title", "at step 4")
    dash_duo.find_element("label[for='reward-band-p25-p75']").click()
    _wait_url(dash_duo, lambda q: q.get("band") == ["p25-p75"])
    assert dash_duo.driver.execute_script("return window.__marker;") == 1

    dash_duo.driver.back()
    _wait_url(dash_duo, lambda q: q.get("step") == ["4"] and "band" not in q)
    WebDriverWait(dash_duo.driver, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#reward-band-std").is_selected()
    )  # the radio may be drawn again between finding it and reading it (seen under load)
    dash_duo.driver.back()
    _wait_url(dash_duo, lambda q: q.get("step") == ["3"])
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 3 · 3 of 25")
    dash_duo.wait_for_contains_text("#reward-hist-title", "at step 3")
    dash_duo.driver.forward()
    _wait_url(dash_duo, lambda q: q.get("step") == ["4"])
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 4 · 4 of 25")
    dash_duo.wait_for_contains_text("#reward-hist-title", "at step 4")
    assert dash_duo.get_logs() == []


def test_reward103_run_without_token_fields_and_bad_params(dash_duo, dash_app, fixtures_dir):
    """The poem run (no token fields) renders with notes instead of KL and token length; step=abc gives a
    visible notice; clicking a curve point selects that step."""
    _open(dash_duo, dash_app, "/reward?run=rlloggingboard-eval-poem&step=abc")
    dash_duo.wait_for_contains_text("#reward-notices", "Ignored step='abc'", timeout=30)
    dash_duo.wait_for_contains_text("#reward-curve-kl-note", "No per-token log-probs")
    dash_duo.wait_for_contains_text("#reward-curve-length-note", "characters")
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 2300 · 24 of 24")
    dash_duo.wait_for_element("#reward-curve-reward g.trace.scatter", timeout=30)
    # Click at step 0 of the reward curve. The drag layer covers the points, so click it at the step's
    # pixel (selenium 4.2 measures the offset from the element's top-left corner).
    plot = dash_duo.find_element("#reward-curve-reward .nsewdrag")
    x0 = dash_duo.driver.execute_script(
        "const gd = document.querySelector('#reward-curve-reward .js-plotly-plot');"
        "return gd._fullLayout.xaxis.l2p(0);"
    )
    ActionChains(dash_duo.driver).move_to_element_with_offset(
        plot, int(x0) + 1, int(plot.size["height"] / 2)
    ).click().perform()
    _wait_url(dash_duo, lambda q: q.get("step") == ["0"])
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 0 · 1 of 24")
    assert dash_duo.get_logs() == []


def test_reward105_navbar_keeps_run_and_step(dash_duo, dash_app, fixtures_dir):
    """From the reward page at a step chosen there, the navbar's Responses opens that step of that run (it
    opened the run's last step), and its Reward link brings the step back."""
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small&step=5")
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 5 · 5 of 25", timeout=30)
    dash_duo.find_element("#reward-next").click()  # the page writes step=6 into its own URL
    _wait_url(dash_duo, lambda q: q.get("step") == ["6"])
    dash_duo.find_element("#app-nav-responses").click()
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/responses")
    assert _query(dash_duo) == {"run": ["trl-ppo-small"], "step": ["6"]}
    dash_duo.wait_for_contains_text("#responses-summary", "at step 6", timeout=30)
    dash_duo.find_element("#app-nav-reward").click()
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/reward")
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 6 · 6 of 25", timeout=30)
    assert _query(dash_duo) == {"run": ["trl-ppo-small"], "step": ["6"]}
    assert dash_duo.get_logs() == []


def test_reward106_reward_hacking_points_open_their_responses(dash_duo, dash_app, fixtures_dir):
    """Right below the four curves, the truncation curve's point of a step opens exactly that step's
    responses with no end token, in view; a regular expression typed in the search box goes into the URL
    (q=) and charts the share of each step's responses it matches, whose points open those responses."""
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small")
    fig = "#reward-signal-degeneration"
    dash_duo.wait_for_element(f"{fig} .scatterlayer .trace .points path", timeout=30)
    # The truncation trace (the second): its highest point, a step with responses cut at the limit.
    step, share, k = dash_duo.driver.execute_script(
        "const d = document.querySelector(arguments[0] + ' .js-plotly-plot')._fullData[1];"
        "const y = Array.from(d.y), x = Array.from(d.x); let k = 0;"
        "y.forEach((v, i) => { if (v > y[k]) { k = i; } }); return [x[k], y[k], k];",
        fig,
    )
    assert share > 0
    point = dash_duo.driver.find_elements(By.CSS_SELECTOR, f"{fig} .scatterlayer .trace")[1].find_elements(
        By.CSS_SELECTOR, ".points path"
    )[k]
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    _landed_on_responses(dash_duo, round(share * 16))
    q = _query(dash_duo)
    assert q["run"] == ["trl-ppo-small"] and q["step"] == [str(step)] and q["truncated"] == ["1"]
    assert dash_duo.get_logs() == []

    dash_duo.driver.back()
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/reward")
    dash_duo.wait_for_element(f"{fig} .scatterlayer .trace .points path", timeout=30)  # drawn again
    box = dash_duo.find_element("#reward-q")
    box.send_keys("(?i)very \\w+\n")
    _wait_url(dash_duo, lambda q: q.get("q") == ["(?i)very \\w+"])
    search = "#reward-signal-search"
    dash_duo.wait_for_element(f"{search} .scatterlayer .trace .points path", timeout=30)
    step, share, k = dash_duo.driver.execute_script(
        "const d = document.querySelector(arguments[0] + ' .js-plotly-plot')._fullData[0];"
        "const y = Array.from(d.y), x = Array.from(d.x); let k = 0;"
        "y.forEach((v, i) => { if (v > y[k]) { k = i; } }); return [x[k], y[k], k];",
        search,
    )
    point = dash_duo.driver.find_elements(By.CSS_SELECTOR, f"{search} .scatterlayer .trace .points path")[k]
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    _landed_on_responses(dash_duo, round(share * 16))
    q = _query(dash_duo)
    assert q["step"] == [str(step)] and q["q"] == ["(?i)very \\w+"]
    assert dash_duo.get_logs() == []


def test_reward107_a_long_runs_heatmap_column_click_zooms_and_back(
    dash_duo, dash_app, fixtures_dir, monkeypatch
):
    """A run of more steps than thinning.MAX_POINTS (here 10): the heatmap draws columns of several steps; a
    click on one draws the steps around it, one per column (heatmap= in the URL, the note and "Show all
    steps" say so), without leaving the page; "Show all steps" draws the columns again."""
    from data import thinning

    monkeypatch.setattr(thinning, "MAX_POINTS", 10)
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small&step=5")
    note = "#reward-heatmap-note"
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: "each column" in d.find_element(By.CSS_SELECTOR, note).text
    )
    drag = dash_duo.wait_for_element("#reward-heatmap .nsewdrag", timeout=30)
    # Selenium offsets an SVG element's point from its top left corner: the middle of the chart.
    ActionChains(dash_duo.driver).move_to_element_with_offset(
        drag, int(drag.size["width"] * 0.5), int(drag.size["height"] * 0.5)
    ).click().perform()
    _wait_url(dash_duo, lambda q: "heatmap" in q)
    q = _query(dash_duo)
    lo, hi = map(int, q["heatmap"][0].split("-"))
    assert urlparse(dash_duo.driver.current_url).path == "/reward" and q["step"] == ["5"] and hi - lo == 9
    dash_duo.wait_for_contains_text(note, f"Steps {lo}–{hi} of ", timeout=30)
    dash_duo.wait_for_element("#reward-heatmap-all", timeout=30).click()
    _wait_url(dash_duo, lambda q: "heatmap" not in q)
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: "each column" in d.find_element(By.CSS_SELECTOR, note).text
    )
    assert dash_duo.get_logs() == []


def test_reward108_a_step_the_run_lacks_is_one_step_everywhere(dash_duo, dash_app, board_root, tmp_path):
    """A run of steps 1, 2, 5, 9 at step=4: the reward page shows step 2 with the run's one notice, its
    navbar's Responses link carries step 2 and opens step 2's responses; the responses page asked for step 4
    shows step 2 with the same notice."""
    from tests.integration.test_step_rule import NOTICE, RUN, write_gaps_run

    write_gaps_run(tmp_path / "root")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    _open(dash_duo, dash_app, f"/reward?run={RUN}&step=4")
    dash_duo.wait_for_text_to_equal("#reward-notices", NOTICE, timeout=30)
    dash_duo.wait_for_text_to_equal("#reward-step-text", "step 2 · 2 of 4", timeout=30)
    link = dash_duo.find_element("#app-nav-responses")
    WebDriverWait(dash_duo.driver, 30).until(
        lambda _: link.get_attribute("href").endswith(f"?run={RUN}&step=2")
    )
    link.click()
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/responses")
    assert _query(dash_duo) == {"run": [RUN], "step": ["2"]}
    dash_duo.wait_for_contains_text("#responses-summary", "at step 2", timeout=30)
    dash_duo.wait_for_page(f"{dash_duo.server.url.rstrip('/')}/responses?run={RUN}&step=4")
    dash_duo.wait_for_text_to_equal("#responses-notices", NOTICE, timeout=30)
    dash_duo.wait_for_contains_text("#responses-summary", "at step 2", timeout=30)
    assert dash_duo.find_element("#app-nav-reward").get_attribute("href").endswith(f"?run={RUN}&step=2")
    assert dash_duo.get_logs() == []


def test_reward140_critic_point_opens_its_step_by_value_error(dash_duo, dash_app, fixtures_dir):
    """The critic-health panel of the TRL PPO run: the explained-variance trace is named by its returns, and
    a click on its point of a step opens that step's 16 responses sorted by value error, the largest first."""
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small")
    fig = "#reward-signal-critic"
    dash_duo.wait_for_element(f"{fig} .scatterlayer .trace .points path", timeout=30)
    name, step, k = dash_duo.driver.execute_script(
        "const d = document.querySelector(arguments[0] + ' .js-plotly-plot')._fullData[0];"
        "const x = Array.from(d.x); const k = x.indexOf(12); return [d.name, x[k], k];",
        fig,
    )
    assert name == "explained variance (trainer returns)" and step == 12
    point = dash_duo.driver.find_elements(By.CSS_SELECTOR, f"{fig} .scatterlayer .trace")[0].find_elements(
        By.CSS_SELECTOR, ".points path"
    )[k]
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    _landed_on_responses(dash_duo, 16)
    q = _query(dash_duo)
    assert q["run"] == ["trl-ppo-small"] and q["step"] == ["12"] and q["sort"] == ["value_error_abs_mean"]
    assert dash_duo.get_logs() == []
