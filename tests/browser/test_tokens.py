"""Token page in a real browser: the strip's tokens and one token's hover values, chart hover outlining
its token, model text that looks like HTML shown literally and never run, the metric picker writing the
URL with Back restoring it, a 32,000-token response shown a window at a time, in time, and previous /
next through the responses view the page was opened from."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import WebDriverWait

from benchmarks.bench_tokens import write_long_run
from data.store import sample_id

STRIP = "#tokens-strip"


def _open(dash_duo, dash_app, path):
    dash_duo.start_server(dash_app, navigate=False)
    dash_duo.wait_for_page(f"{dash_duo.server.url.rstrip('/')}{path}")


def _strip_filled(dash_duo, timeout=30) -> int:
    """Wait for the strip to be filled; its number of tokens."""
    WebDriverWait(dash_duo.driver, timeout).until(
        lambda d: d.execute_script(f"return document.querySelector('{STRIP}[data-rendered]') !== null;")
    )
    return dash_duo.driver.execute_script(f"return document.querySelectorAll('{STRIP} > span').length;")


def _hover_token(dash_duo, pos: int) -> str:
    """The hover text of the strip's token at ``pos``: the mouse moved onto it until its title is written
    (again onto a fresh element should the strip be filled anew meanwhile, as under load)."""

    def hovered(driver):
        span = dash_duo.find_element(f'{STRIP} > span[data-pos="{pos}"]')
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", span)
        ActionChains(driver).move_to_element(span).perform()
        return span.get_attribute("title")

    return WebDriverWait(
        dash_duo.driver, 30, poll_frequency=1, ignored_exceptions=(StaleElementReferenceException,)
    ).until(hovered)


def _hover_chart(dash_duo, pos: int) -> None:
    """Move the mouse over position ``pos`` of the first chart (a mousemove on Plotly's drag layer)."""
    dash_duo.wait_for_element("#tokens-charts .js-plotly-plot .nsewdrag", timeout=30)
    dash_duo.driver.execute_script(
        "var gd = document.querySelector('#tokens-charts .js-plotly-plot');"
        "var fl = gd._fullLayout, box = gd.getBoundingClientRect();"
        "var x = box.left + fl._size.l + fl.xaxis.d2p(arguments[0]);"
        "var y = box.top + fl._size.t + fl._size.h / 2;"
        "gd.querySelector('.nsewdrag').dispatchEvent("
        "  new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));",
        pos,
    )


def test_tokens201_strip_tokens_and_hover_values(dash_duo, dash_app, fixtures_dir):
    """PPO rank1:136 shows its 16 visible tokens, drawn as the strip mounted (not by the later callback);
    hovering position 5 lists its values; hovering a chart point outlines the same token in the strip."""
    sid = sample_id("rank1.jsonl", 136)
    _open(dash_duo, dash_app, f"/tokens?run=trl-ppo-small&sample={sid}")
    assert _strip_filled(dash_duo) == 16
    # Filled from the layout Dash rendered (dash_component_api.getLayout), which a Dash upgrade could take
    # away: the strip would still fill, through its callback, 150-200 ms later.
    assert dash_duo.driver.execute_script(f"return document.querySelector('{STRIP}').__doneSent;") is True
    text = dash_duo.find_element(STRIP).text
    assert text.startswith(" is rather happy although we will a goodarming .")
    tip = _hover_token(dash_duo, 5).split("\n")
    assert tip[0] == 'position 5 · token "Ġw"'
    assert "log-prob (policy): -3.969" in tip and "log-prob (reference): -0.5332" in tip
    assert "KL (k3): 26.61" in tip and "log-ratio log π − log π_ref: -3.435" in tip
    assert any(line.startswith("critic value: ") for line in tip)
    # The pad at the end carries the sequence reward: shown and marked.
    assert 'token "<pad>" · pad' in _hover_token(dash_duo, 15)
    assert "token reward: 1.5" in _hover_token(dash_duo, 15)

    # TRL's own per-token fields, as the file has them (rank1.jsonl line 136): in the hover and a chart.
    with open(fixtures_dir / "trl-ppo-small" / "rank1.jsonl") as f:
        original = json.loads(f.readlines()[135])
    for field in ("advantages", "returns"):
        line = next(x for x in tip if x.startswith(f"{field} (from the file): "))
        assert float(line.split(": ")[1]) == pytest.approx(original[field][5], rel=1e-3)
    dash_duo.wait_for_element('#tokens-charts [id*="file"] .js-plotly-plot', timeout=30)
    names = dash_duo.driver.execute_script(
        "return document.querySelector('#tokens-charts [id*=\"file\"] .js-plotly-plot').data.map(t => t.name);"
    )
    assert names == ["advantages (from the file)", "returns (from the file)"]

    _hover_chart(dash_duo, 8)
    dash_duo.wait_for_element(f'{STRIP} > span.token-hl[data-pos="8"]', timeout=30)
    assert dash_duo.get_logs() == []


def test_tokens202_model_text_is_text(dash_duo, dash_app, board_root, tmp_path):
    """<script>, <img onerror>, <think> and markdown in prompt, response and tokens show literally and
    run nothing."""
    script = "<script>window.__pwned=1</script>"
    img = '<img src=x onerror="window.__pwned=1">'
    tokens = [script, "Ġ", img, "Ġ<think>", "Ċ**bold**", "<|endoftext|>"]
    record = {
        "prompt": f"Say {script} and {img}",
        "response": f"{script} {img} <think>\n**bold**<|endoftext|>",
        "ref_response": f"<think>{img}</think> **bold**",
        "reward": 1.0,
        "ref_reward": 0.5,
        "step": 1,
        "response_tokens": tokens,
        "logprobs": [-0.5, -1.0, -2.0, -0.1, -0.3, -0.01],
        "ref_logprobs": [-0.6, -1.5, -1.0, -0.1, -0.2, -0.01],
        "token_rewards": [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
    }
    run = tmp_path / "root" / "html-run"
    run.mkdir(parents=True)
    (run / "data.jsonl").write_text(json.dumps(record) + "\n")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    _open(dash_duo, dash_app, f"/tokens?run=html-run&sample={sample_id('data.jsonl', 1)}")
    assert _strip_filled(dash_duo) == 6  # the eos is a pad-list token kept: it carries the reward
    d = dash_duo.driver
    assert d.find_element("css selector", "#tokens-text-prompt").text == f"Say {script} and {img}"
    assert d.find_element("css selector", "#tokens-text-response").text == f"{script} {img} <think>\n**bold**"
    assert d.find_element("css selector", "#tokens-text-reference").text == f"<think>{img}</think> **bold**"
    spans = d.execute_script(
        f"return [...document.querySelectorAll('{STRIP} > span')].map(s => s.textContent);"
    )
    assert spans == [script, " ", img, " <think>", "\n**bold**", "<|endoftext|>"]
    assert "<think>" in _hover_token(dash_duo, 3)
    _hover_chart(dash_duo, 2)  # the hover label names the <img …> token
    dash_duo.wait_for_element(f'{STRIP} > span.token-hl[data-pos="2"]', timeout=30)
    assert "onerror" in d.execute_script("return document.querySelector('.hoverlayer').textContent;")
    assert d.execute_script("return typeof window.__pwned;") == "undefined"
    assert d.execute_script("return document.querySelectorAll('img[src=\"x\"], think, b').length;") == 0
    assert dash_duo.get_logs() == []


def test_tokens203_metric_writes_url_and_back_restores(dash_duo, dash_app, fixtures_dir):
    """Choosing a metric recolours the strip and writes metric= without a reload; Back restores KL; next
    opens the following response of the step."""
    sid = sample_id("rank0.jsonl", 1)
    _open(dash_duo, dash_app, f"/tokens?run=trl-grpo-small&sample={sid}")
    _strip_filled(dash_duo)
    dash_duo.wait_for_contains_text("#tokens-body .card-header", "KL (k3)", timeout=30)
    dash_duo.driver.execute_script("window.__marker = 1;")
    dash_duo.select_dcc_dropdown("#tokens-metric", value="token reward")

    def query():
        return parse_qs(urlparse(dash_duo.driver.current_url).query)

    WebDriverWait(dash_duo.driver, 20).until(lambda _: query().get("metric") == ["token_reward"])
    dash_duo.wait_for_contains_text("#tokens-body .card-header", "token reward", timeout=30)
    _strip_filled(dash_duo)
    assert dash_duo.driver.execute_script("return window.__marker;") == 1
    dash_duo.driver.back()
    WebDriverWait(dash_duo.driver, 20).until(lambda _: "metric" not in query())
    dash_duo.wait_for_contains_text("#tokens-body .card-header", "KL (k3)", timeout=30)
    # Next response of the step, in (file, line) order.
    dash_duo.find_element("#tokens-next").click()
    nxt = sample_id("rank0.jsonl", 2)
    WebDriverWait(dash_duo.driver, 20).until(lambda _: query().get("sample") == [nxt])
    dash_duo.wait_for_text_to_equal("#tokens-source-line", "rank0.jsonl:2", timeout=30)
    dash_duo.wait_for_contains_text("#tokens-body", "response 2 of 16 in step 1", timeout=30)
    _strip_filled(dash_duo)
    assert dash_duo.get_logs() == []


def test_tokens204_long_response_renders_a_window(dash_duo, dash_app, board_root, tmp_path):
    """A 32,000-token response: the strip shows its first window (and marks when) and says how many of
    the tokens are shown; scrolling the strip to its end brings the next window, a chart's point beyond
    them brings the tokens up to it (outlined); the charts draw at most CHART_POINTS points."""
    from components.token_figures import CHART_POINTS
    from components.token_strip import STRIP_WINDOW

    sid = write_long_run(tmp_path / "root" / "long", tokens=32000)
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    path = f"/tokens?run=long&sample={sid}"
    _open(dash_duo, dash_app, path)  # first visit: ingest, browser caches
    assert _strip_filled(dash_duo, timeout=60) == STRIP_WINDOW
    dash_duo.driver.get(f"{dash_duo.server.url.rstrip('/')}{path}&metric=prob")
    assert _strip_filled(dash_duo, timeout=60) == STRIP_WINDOW
    # How soon is benchmarks/bench_tokens.py's to measure (a timed test fails on a loaded machine): here,
    # that the page marks the moment (the mark the benchmark reads).
    filled = dash_duo.driver.execute_script(
        "return performance.getEntriesByName('tokens-strip-filled')[0].startTime;"
    )
    assert filled > 0
    dash_duo.wait_for_text_to_equal(
        "#tokens-strip-status", f"{STRIP_WINDOW:,} of 32,000 tokens shown: scroll the strip for more."
    )
    dash_duo.driver.execute_script(
        f"var s = document.querySelector('{STRIP}'); s.scrollTop = s.scrollHeight;"
    )
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: (
            d.execute_script(f"return document.querySelectorAll('{STRIP} > span').length;")
            == 2 * STRIP_WINDOW
        )
    )
    assert dash_duo.find_element(f'{STRIP} > span[data-pos="{2 * STRIP_WINDOW - 1}"]').text
    points = dash_duo.driver.execute_script(
        "return document.querySelector('#tokens-charts .js-plotly-plot')._fullData[0].x.length;"
    )
    assert 0 < points <= CHART_POINTS
    _hover_chart(dash_duo, 20_000)
    WebDriverWait(dash_duo.driver, 30).until(
        lambda d: (
            d.execute_script(
                f"var el = document.querySelector('{STRIP} > span.token-hl');"
                "return el ? +el.getAttribute('data-pos') : null;"
            )
            is not None
        )
    )
    hl = int(dash_duo.find_element(f"{STRIP} > span.token-hl").get_attribute("data-pos"))
    assert abs(hl - 20_000) < 64  # the chart's nearest drawn point
    assert dash_duo.get_logs() == []


def test_tokens205_colour_by_a_field_of_the_trainer(dash_duo, dash_app, fixtures_dir):
    """The picker offers TRL's own per-token `advantages`: choosing it writes metric=file:advantages and
    colours the strip on a scale centred at 0 (the first token's advantage, -0.69, is red); a response
    without that field says so and falls back."""
    sid = sample_id("rank0.jsonl", 1)
    _open(dash_duo, dash_app, f"/tokens?run=trl-ppo-small&sample={sid}")
    _strip_filled(dash_duo)
    dash_duo.select_dcc_dropdown("#tokens-metric", value="advantages (from the file)")
    WebDriverWait(dash_duo.driver, 20).until(
        lambda _: parse_qs(urlparse(dash_duo.driver.current_url).query).get("metric") == ["file:advantages"]
    )
    dash_duo.wait_for_contains_text("#tokens-body .card-header", "advantages (from the file)", timeout=30)
    _strip_filled(dash_duo)
    rgb = dash_duo.driver.execute_script(
        f"return getComputedStyle(document.querySelector('{STRIP} > span[data-pos=\"0\"]')).backgroundColor;"
    )
    r, g, b = (int(x) for x in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    assert r > b + 40, rgb  # red: below 0 on the diverging scale
    # GRPO's lines have no such field: a notice, and the first metric it has.
    grpo = f"/tokens?run=trl-grpo-small&sample={sid}&metric=file:advantages"
    dash_duo.driver.get(f"{dash_duo.server.url.rstrip('/')}{grpo}")
    dash_duo.wait_for_contains_text(
        "#tokens-body", "no per-token field 'advantages' of the trainer", timeout=30
    )
    assert dash_duo.get_logs() == []


def _rgb(dash_duo, pos: int) -> tuple[int, int, int]:
    rgb = dash_duo.driver.execute_script(
        f"return getComputedStyle(document.querySelector('{STRIP} > span[data-pos=\"{pos}\"]')).backgroundColor;"
    )
    r, g, b = (int(x) for x in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return r, g, b


def test_tokens206_inference_trainer_gap(dash_duo, dash_app, board_root, tmp_path):
    """A NeMo-RL response: picking 'trainer − inference log-prob' writes metric=infer_gap and colours the
    strip on its diverging scale (gap -0.25 red, +0.5 the full blue end, 0 white), the hover gives the gap
    and the line of figures says where the largest is."""
    from tests.integration.test_tokens import write_nemo_rl_run

    sid = write_nemo_rl_run(tmp_path / "root" / "nemo")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    _open(dash_duo, dash_app, f"/tokens?run=nemo&sample={sid}")
    _strip_filled(dash_duo)
    dash_duo.select_dcc_dropdown("#tokens-metric", value="trainer − inference log-prob")
    WebDriverWait(dash_duo.driver, 20).until(
        lambda _: parse_qs(urlparse(dash_duo.driver.current_url).query).get("metric") == ["infer_gap"]
    )
    dash_duo.wait_for_contains_text("#tokens-body .card-header", "trainer − inference log-prob", timeout=30)
    assert _strip_filled(dash_duo) == 4
    below, zero, above = _rgb(dash_duo, 1), _rgb(dash_duo, 0), _rgb(dash_duo, 3)
    assert below[0] > below[2] + 40 and above[2] > above[0] + 40, (below, above)
    assert min(zero) > 230, zero  # 0: the scale's white middle
    assert "trainer − inference log-prob: 0.5" in _hover_token(dash_duo, 3).split("\n")
    line = dash_duo.find_element("#tokens-gap").text
    # a token id, shown as one; the tail's threshold is ln 2 since h-gap (0.1 before): no token beyond it
    assert "max |gap|" in line and "3 ('⟨43⟩')" in line and "|gap| > ln 2" in line and "0.0%" in line
    assert dash_duo.get_logs() == []


def test_tokens207_previous_next_walk_the_rows_clicked_from(dash_duo, dash_app, fixtures_dir):
    """From a filtered, sorted responses view (PPO step 3, reward ≥ 1.5, by KL: 11 rows) a click on the
    third row's file:line opens its tokens saying '3 of 11' with the filter; next opens the fourth row of
    that view ('4 of 11', its own file:line), previous goes back to the third, and 'back to the responses'
    returns to the same view with the response shown selected."""
    view = "run=trl-ppo-small&step=3&reward_min=1.5&sort=kl_mean"
    _open(dash_duo, dash_app, f"/responses?{view}")
    dash_duo.wait_for_text_to_equal("#responses-count", "11", timeout=30)
    links = [
        f".ag-pinned-left-cols-container .ag-row[row-index='{k}'] a" for k in range(4)
    ]  # the rows' file:line links, in the view's order
    dash_duo.wait_for_element(links[3], timeout=30)
    names = [dash_duo.find_element(css).text for css in links]
    dash_duo.find_element(links[2]).click()
    where = "#tokens-nav-where"
    dash_duo.wait_for_text_to_equal("#tokens-source-line", names[2], timeout=30)
    assert dash_duo.find_element(where).text == (
        "3 of 11 responses at step 3 · 1.5 ≤ reward · sorted by KL mean per token (k3), highest first"
    )
    dash_duo.find_element("#tokens-next").click()
    dash_duo.wait_for_text_to_equal("#tokens-source-line", names[3], timeout=30)
    assert dash_duo.find_element(where).text.startswith("4 of 11 responses at step 3")
    dash_duo.find_element("#tokens-prev").click()
    dash_duo.wait_for_text_to_equal("#tokens-source-line", names[2], timeout=30)
    assert dash_duo.find_element(where).text.startswith("3 of 11 responses")
    sample = parse_qs(urlparse(dash_duo.driver.current_url).query)["sample"]
    dash_duo.find_element("#tokens-back").click()
    WebDriverWait(dash_duo.driver, 30).until(lambda d: urlparse(d.current_url).path == "/responses")
    dash_duo.wait_for_text_to_equal("#responses-count", "11", timeout=30)
    q = parse_qs(urlparse(dash_duo.driver.current_url).query)
    assert q["sample"] == sample and q["reward_min"] == ["1.5"] and q["sort"] == ["kl_mean"]
    dash_duo.wait_for_element("#responses-text-where", timeout=30)
    assert dash_duo.find_element("#responses-text-where").text == names[2]
    assert dash_duo.get_logs() == []


def test_tokens208_loss_masked_positions_hatched_and_ids_apart(dash_duo, dash_app, board_root, tmp_path):
    """A miles response joined to its per-token Parquet: the positions its loss_mask drops (a tool's result)
    are hatched whatever the strip is coloured by, said in their hover and the legend; token ids without a
    tokenizer are shown as ⟨id⟩, apart."""
    from tests.unit.ingest.test_dialect_miles_join import _dump, _line, _sample

    run = tmp_path / "root" / "miles"
    _dump(
        run,
        "3",
        [_line(7, 1.0, "4")],
        [_sample(7, [1, 2], [10, 11, 12, 13], [1, 0, 0, 1], [-0.5, 0, 0, -0.25])],
    )
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    _open(
        dash_duo,
        dash_app,
        f"/tokens?run=miles&sample={sample_id('trajectory/3.jsonl', 1)}&metric=file:rollout_log_probs",
    )
    assert _strip_filled(dash_duo) == 4
    assert dash_duo.find_element(STRIP).text == "⟨10⟩⟨11⟩⟨12⟩⟨13⟩"
    masked = dash_duo.driver.execute_script(
        f"return Array.from(document.querySelectorAll('{STRIP} > span')).map("
        "s => [s.classList.contains('token-masked'), getComputedStyle(s).backgroundImage.startsWith('repeating')]);"
    )
    assert masked == [[False, False], [True, True], [True, True], [False, False]]
    assert "dropped by the loss mask" in _hover_token(dash_duo, 1)
    assert (
        "hatched: dropped by the loss (loss_mask = 0), 2 of 4 positions"
        in dash_duo.find_element("#tokens-body").text
    )
    assert dash_duo.get_logs() == []
