"""A derived kind built beside the others (``Kind.beside``, data/derived/registry.py: the prompt index):
it runs while the kinds after it build, and what it records in the commit comes after them."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from data.derived import registry
from data.derived.registry import Kind


def _kinds(events: list[str], started: threading.Event, later_done: threading.Event, fail: bool = False):
    def beside(c):
        started.set()
        events.append("beside: working")
        # Runs while the later kind builds: it waits for that kind, which could not run were it sequential.
        assert later_done.wait(10), "the later kind did not run while the kind beside it was building"
        if fail:
            raise RuntimeError("beside failed")
        return lambda: events.append("beside: recorded")

    def later(c):
        assert started.wait(10)
        events.append("later: built")
        later_done.set()

    def noop(*_):
        return None

    return (
        Kind("first", "a*", "x", lambda c: events.append("first: built"), noop, "", None),
        Kind("aside", "b*", "x", None, noop, "", beside),
        Kind("later", "c*", "x", later, noop, ""),
    )


def test_beside001_runs_beside_later_kinds_and_records_after_them(monkeypatch):
    """The kind beside runs while the later kind builds (each waits for the other), and records last."""
    events: list[str] = []
    monkeypatch.setattr(registry, "KINDS", _kinds(events, threading.Event(), threading.Event()))
    registry.build_all(SimpleNamespace())
    assert events[0] == "first: built"
    assert set(events[1:3]) == {"beside: working", "later: built"}
    assert events[3:] == ["beside: recorded"]


def test_beside002_what_it_raises_reaches_the_commit(monkeypatch):
    """A kind beside that fails fails the commit (nothing of it recorded)."""
    events: list[str] = []
    monkeypatch.setattr(registry, "KINDS", _kinds(events, threading.Event(), threading.Event(), fail=True))
    with pytest.raises(RuntimeError, match="beside failed"):
        registry.build_all(SimpleNamespace())
    assert "beside: recorded" not in events
