"""Gap page in a real browser: its three charts draw, a correction picked writes the URL and redraws its
chart, Back restores the earlier one, and a point of the tail curve opens its step's responses sorted."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.unit.metrics.test_infer_gap import write_nemo_rl_run


def _query(dash_duo) -> dict:
    return parse_qs(urlparse(dash_duo.driver.current_url).query)


def test_gap201_rule_in_the_url_back_and_a_point_opens_responses(dash_duo, dash_app, board_root, tmp_path):
    """/gap of a NeMo-RL run: the charts draw; truncated IS picked puts rule=tis in the URL and the chart's
    title follows; Back brings masked IS back; a click on the tail curve's step 2 point opens step 2's
    responses sorted by tail share, the largest first. No console errors."""
    write_nemo_rl_run(tmp_path / "root" / "nemo", seed=3)
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    dash_duo.start_server(dash_app, navigate=False)
    dash_duo.wait_for_page(f"{dash_duo.server.url.rstrip('/')}/gap?run=nemo")
    dash_duo.wait_for_contains_text("#gap-curve-correction-title", "masked IS at C = 2", timeout=30)
    for key in ("gap", "tail", "correction"):
        dash_duo.wait_for_element(f"#gap-curve-{key} g.scatterlayer path.js-line", timeout=30)
    dash_duo.driver.find_element(By.CSS_SELECTOR, "#gap-rule input[value='tis']").click()
    WebDriverWait(dash_duo.driver, 30).until(lambda _: _query(dash_duo).get("rule") == ["tis"])
    dash_duo.wait_for_contains_text("#gap-curve-correction-title", "truncated IS at C = 2", timeout=30)
    dash_duo.driver.back()
    WebDriverWait(dash_duo.driver, 30).until(lambda _: "rule" not in _query(dash_duo))
    dash_duo.wait_for_contains_text("#gap-curve-correction-title", "masked IS at C = 2", timeout=30)
    # A point of the tail curve: Plotly's click on its second marker (step 2).
    dash_duo.driver.execute_script(
        "const g = document.querySelector('#gap-curve-tail .js-plotly-plot');"
        "const i = g.data.findIndex(t => (t.name || '').includes('(band:'));"
        "g.emit('plotly_click', {points: [{x: 2, y: 0, curveNumber: i, pointNumber: 1, customdata: 'infer_gap_tail_share'}]});"
    )
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/responses")
    assert _query(dash_duo) == {"run": ["nemo"], "step": ["2"], "sort": ["infer_gap_tail_share"]}
    assert dash_duo.get_logs() == []
