"""The live box in a real browser: a page rendered from an older commit of its run than the shell's first
poll saw (a run opened during its first read) still learns that it is stale."""

from __future__ import annotations

import json
import threading

from data import service


def _write_run(run_dir, steps: int, per_step: int = 4) -> None:
    run_dir.mkdir(parents=True)
    lines = [
        {"prompt": f"q{i}", "response": f"r{s}-{i}", "reward": (s + i) / 10, "step": s}
        for s in range(1, steps + 1)
        for i in range(per_step)
    ]
    (run_dir / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_live201_page_from_the_first_read_offers_the_steps_it_lacks(
    dash_duo, dash_app, board_root, tmp_path, monkeypatch
):
    """/reward (no run in the URL) of a run whose files were just written, rendered before the first read
    saw them still (the last step hidden): the box offers the missing step, and its click shows all 3.
    Before, the poll took its first snapshot (or none: no run in the URL) as the page's, and never
    offered anything."""
    # As for a run too large to wait for: the page is rendered from the first commit, last step hidden.
    monkeypatch.setattr(service, "BIG_CATCH_UP", 0)
    # The read that shows the last step (the files seen still after the first read) waits until the page
    # shows the first commit: on a loaded machine it could otherwise come first, and the page would
    # rightly show all 3 steps with nothing to offer.
    drawn, real = threading.Event(), service.ingest_run

    def held(*args, complete=True, **kw):
        if complete:
            drawn.wait(60)
        return real(*args, complete=complete, **kw)

    monkeypatch.setattr(service, "ingest_run", held)
    _write_run(tmp_path / "root" / "fresh", steps=3)
    board = board_root(tmp_path / "root", cache_dir=tmp_path / "cache", refresh_seconds=1.0)
    assert board.store("fresh", wait=30).steps().height == 2  # the first commit: step 3 held back
    dash_duo.start_server(dash_app)
    dash_duo.driver.get(f"{dash_duo.server_url}/reward")
    dash_duo.wait_for_contains_text("#reward-step-text", "step 2 · 2 of 2", timeout=30)
    drawn.set()
    dash_duo.wait_for_text_to_equal("#app-live-new", "1 new step available · reload", timeout=30)
    dash_duo.find_element("#app-live-new").click()
    dash_duo.wait_for_contains_text("#reward-step-text", "step 3 · 3 of 3", timeout=30)
    assert not dash_duo.find_element("#app-live-new").is_displayed()
    assert dash_duo.get_logs() == []
