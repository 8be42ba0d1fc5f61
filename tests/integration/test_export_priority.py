"""A served export gives way to the pages only while a page's callback is being answered: the callback
route counts itself in ``data.export_turns.PAGES`` (what ``taking_turns`` rests for)."""

from __future__ import annotations

from data import export_turns
from tests.conftest import router_body


def test_exportprio001_a_callback_counts_as_a_page_in_flight(client, monkeypatch):
    """While the pages router callback runs, PAGES is busy; once answered (or refused as malformed), not."""
    seen: list[bool] = []
    real = export_turns.InFlight.__enter__

    def enter(self):
        out = real(self)
        seen.append(self is export_turns.PAGES and export_turns.PAGES.busy())
        return out

    monkeypatch.setattr(export_turns.InFlight, "__enter__", enter)
    assert not export_turns.PAGES.busy()
    r = client.post("/_dash-update-component", json=router_body("/reward", ""))
    assert r.status_code == 200
    assert seen == [True]
    assert not export_turns.PAGES.busy()
    r = client.post("/_dash-update-component", json={"output": "nothing"})
    assert r.status_code == 400 and seen == [True]  # refused before any page work
