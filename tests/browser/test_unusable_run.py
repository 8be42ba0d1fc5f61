"""A run of only bad lines (a format the board does not read) in a real browser: every page says so and
points to the runs page, none stays "Loading…", and neither the browser nor the server logs an error."""

from __future__ import annotations

import logging

import pytest

from tests.waiting import wait_until

PAGES = ("/reward", "/responses", "/prompts", "/tokens")


@pytest.fixture
def unusable_root(tmp_path, board_root):
    run = tmp_path / "root" / "unknown-format"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_text('{"foo": 1}\n{"bar": [1, 2]}\nnot json\n')
    return board_root(tmp_path / "root", cache_dir=tmp_path / "cache")


def _loading(dash_duo) -> list[str]:
    found = dash_duo.driver.find_elements("css selector", "[data-dash-is-loading='true']")
    return [e.get_attribute("id") or e.get_attribute("class") for e in found]


def test_unusable001_every_page_says_so_and_none_stays_loading(dash_duo, dash_app, unusable_root, caplog):
    """Each page of the run shows the notice naming the runs page, no element of the page is still
    loading after the answer, and nothing is logged at ERROR level by the server."""
    caplog.set_level(logging.ERROR)
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_text_to_equal("#runs-bad-lines-unknown-format", "3", timeout=30)
    for page in PAGES:
        dash_duo.driver.get(dash_duo.server_url + page + "?run=unknown-format")
        dash_duo.wait_for_contains_text("body", "has no usable line", timeout=30)
        assert "The Runs page (/)" in dash_duo.find_element("body").text
        # What is still loading shows Dash's loading state.
        wait_until(
            lambda: not _loading(dash_duo), 60, lambda p=page: f"{p}: none of {_loading(dash_duo)} loading"
        )
        assert "Loading…" not in dash_duo.find_element("body").text, page
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert dash_duo.get_logs() == []
