"""Reward page in a real browser: a bar click leads to the responses behind it, controls write the URL,
Back/Forward restore earlier views, and a run without token fields renders with notes."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from selenium.common.exceptions import ElementClickInterceptedException
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


def _click_when_clear(dash_duo, selector, timeout=15):
    """Click ``selector`` once nothing covers it: on a busy machine the graphs above may still be laid out
    when the link appears, and a click then lands on them (a user would simply click again)."""

    def clicked(driver):
        el = dash_duo.find_element(selector)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
        try:
            el.click()
        except ElementClickInterceptedException:
            return False
        return True

    WebDriverWait(dash_duo.driver, timeout, poll_frequency=0.5).until(clicked)


def _bar_paths(dash_duo):
    """The reward bars (trace 0) with a visible height, in bar order."""
    dash_duo.wait_for_element(f"{BARS} g.point path", timeout=30)
    trace = dash_duo.driver.find_elements(By.CSS_SELECTOR, BARS)[0]
    return [p for p in trace.find_elements(By.CSS_SELECTOR, "g.point path") if p.size["height"] > 2]


def test_reward101_bar_click_opens_its_responses(dash_duo, dash_app, fixtures_dir):
    """Clicking a reward bar of step 5 shows a link whose URL carries run, step and the bar's interval."""
    _open(dash_duo, dash_app, "/reward?run=trl-ppo-small&step=5")
    bar = _bar_paths(dash_duo)[0]
    ActionChains(dash_duo.driver).move_to_element(bar).click().perform()
    dash_duo.wait_for_contains_text("#reward-drill", "Show the", timeout=30)
    expected = dash_duo.driver.execute_script(
        "const d = document.querySelector('#reward-hist .js-plotly-plot').data[0];"
        "const k = d.y.findIndex(v => v > 2); return [d.customdata[k], d.y[k]];"
    )
    (lo, hi, count), height = expected
    assert count == height
    link = dash_duo.find_element("#reward-drill-link")
    assert link.text == f"Show the {count} responses with reward = {lo:g}"  # one bar per value (0.5 steps)
    _click_when_clear(dash_duo, "#reward-drill-link")
    _wait_url(dash_duo, lambda q: "reward_min" in q)
    url = urlparse(dash_duo.driver.current_url)
    q = parse_qs(url.query)
    assert url.path == "/responses"
    assert q["run"] == ["trl-ppo-small"] and q["step"] == ["5"]
    assert float(q["reward_min"][0]) == lo and float(q["reward_max"][0]) == hi
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
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#reward-band-std").is_selected()
    )
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
