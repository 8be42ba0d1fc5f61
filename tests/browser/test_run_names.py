"""Run names that mean something in a URL (#, +, %, &, =, a trailing space) open their own run from the runs
page's links, in a real browser: the links percent-encode them."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By

from tests.waiting import wait_until

# "y" beside "x&run=y": an unencoded link would open /reward?run=x&run=y.
NAMES = ("c#d", "e+f 50%", "x&run=y", "%2e%2e", "space at end ", "y")
LINKS = (("name", "/reward"), ("responses", "/responses"), ("prompts", "/prompts"))


def _click(dash_duo, xpath: str) -> bool:
    """Click the link at ``xpath`` mid-viewport; False when the page moved it meanwhile (the runs page is
    redrawn while a run is read, and the cards are taller than the window: one may lie below it)."""
    try:
        a = dash_duo.driver.find_element(By.XPATH, xpath)
        dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", a)
        a.click()
    except (ElementClickInterceptedException, StaleElementReferenceException):
        return False
    return True


def _hrefs(dash_duo, card: str, shown: str) -> list[str] | None:
    """The hrefs of a card's three links (:data:`LINKS`), or None while the page redraws the card."""
    try:
        return [
            dash_duo.driver.find_element(
                By.XPATH, f"{card}//a[normalize-space(.)='{shown if link == 'name' else link}']"
            ).get_attribute("href")
            for link, _ in LINKS
        ]
    except (NoSuchElementException, StaleElementReferenceException):
        return None


def _follow(dash_duo, xpath: str, path: str) -> None:
    """Click the link at ``xpath`` until the browser is on ``path``: a click that lands while the runs page
    redraws its cards (a run being read) is lost with the element it hit, as a user's would be, and is
    repeated after a few seconds on the link drawn anew."""

    def on_path() -> bool:
        return urlsplit(dash_duo.driver.current_url).path == path

    def clicked_and_moved() -> bool:
        if on_path():
            return True
        try:
            if not _click(dash_duo, xpath):
                return False
        except NoSuchElementException:
            return on_path()
        try:
            wait_until(on_path, 5, f"the browser on {path}", interval=0.1)
        except TimeoutError:
            return False
        return True

    _until(clicked_and_moved, timeout=60)


def _until(cond, timeout=30):
    """``cond()`` once it is truthy (polled every 0.1 s for ``timeout`` s)."""
    return wait_until(cond, timeout, "a condition on the runs page or the opened run", interval=0.1)


def test_runnames001_runs_page_links_open_each_run(dash_duo, dash_app, board_root, tmp_path):
    """Each run's three links (reward, responses, prompts) carry a URL whose run= decodes to the run's exact
    name; each run opened from one of them (each kind of link twice) shows that run: no unknown-run notice,
    no ignored parameter."""
    root = tmp_path / "root"
    for name in NAMES:
        (root / name).mkdir(parents=True)
        line = {"prompt": f"prompt of {name}", "response": "r", "reward": 1.0, "step": 1}
        (root / name / "rank0.jsonl").write_text(json.dumps(line) + "\n")
    board_root(root, cache_dir=tmp_path / "cache")
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_page(url=dash_duo.server_url + "/", timeout=30)
    for i, name in enumerate(NAMES):
        shown = " ".join(name.split())  # what the browser shows of the name (spaces collapsed)
        card = f"//div[contains(@class, 'card-body')][.//h5/a[normalize-space(.)='{shown}']]"
        _until(lambda c=card: dash_duo.driver.find_elements(By.XPATH, c))
        hrefs = _until(lambda c=card, s=shown: _hrefs(dash_duo, c, s))
        for (link, path), href in zip(LINKS, hrefs, strict=True):
            got = urlsplit(href)
            assert (got.path, parse_qs(got.query, keep_blank_values=True)) == (path, {"run": [name]}), (
                name,
                link,
                href,
            )
        # Followed, one kind of link per run in turn (what the browser makes of the href).
        link, path = LINKS[i % len(LINKS)]
        text = shown if link == "name" else link
        _follow(dash_duo, f"{card}//a[normalize-space(.)='{text}']", path)
        query = parse_qs(urlsplit(dash_duo.driver.current_url).query, keep_blank_values=True)
        assert query == {"run": [name]}, (name, link, dash_duo.driver.current_url)
        _until(lambda s=shown: dash_duo.find_element("#app-run").text.strip() == s)
        body = dash_duo.find_element("body").text
        assert "Unknown run" not in body and "Ignored" not in body, (name, link, body[:300])
        dash_duo.driver.back()  # the runs page again, as a user goes back to it
        _until(lambda: urlsplit(dash_duo.driver.current_url).path == "/")
    assert dash_duo.get_logs() == []
