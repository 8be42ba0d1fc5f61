"""Run discovery and ingest where the board may not read part of the rollout root: the reason is reported,
the rest loads, and a failure is not tried again before its back-off ends."""

from __future__ import annotations

import json
import os
import time

import pytest

from data.access import AccessProblem, Backoff, Unreadable, reason_of, status_of
from data.config import Settings
from data.service import Board
from data.store import scan_root
from tests.unprivileged import (
    NOBODY,
    make_unreadable,
    open_folder,
    readable_copy,
    remove,
    require_unprivileged_python,
    run_as_unprivileged,
)

RUN = "trl-ppo-small"


@pytest.fixture
def shared_root(fixtures_dir):
    """A rollout root the unprivileged user may list, holding readable copies of two fixture runs."""
    root = open_folder()
    for run in (RUN, "rlloggingboard-eval-poem"):
        readable_copy(fixtures_dir / run, root / run)
    yield root
    remove(root)


def _scan_as_unprivileged(root) -> dict:
    out = run_as_unprivileged(
        "import json, sys; from data.store import scan_root\n"
        f"s = scan_root({str(root)!r})\n"
        "p = s.problem\n"
        "print(json.dumps({'runs': sorted(s.runs), 'status': s.status, 'unreadable': s.unreadable,"
        " 'headline': p and p.headline, 'detail': p and p.detail, 'trouble': s.trouble,"
        " 'fixes': [f.command for f in p.fixes()] if p else []}))"
    )
    return json.loads(out)


def test_access001_unreadable_root(shared_root):
    """A root of mode 0700 that is not the board's: no runs and no exception; the problem says what, whose
    folder it is, who the board runs as, and the fixes (--user first)."""
    require_unprivileged_python()
    make_unreadable(shared_root)
    got = _scan_as_unprivileged(shared_root)
    assert got["runs"] == [] and got["unreadable"] == {}
    assert got["status"] == "unreadable: permission denied"
    assert got["headline"] == f"The rollout folder {shared_root} cannot be read: permission denied."
    mode = "0700" if os.geteuid() == 0 else "0000"
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    assert f"It is owned by uid {os.geteuid()}, gid {os.getegid()}, mode {mode}" in got["detail"]
    assert f"the board runs as uid {uid}," in got["detail"]
    assert got["fixes"][0] == 'docker run --user "$(id -u):$(id -g)" -v /path/to/rollouts:/data:ro …'
    assert f"u:{uid}:rX" in got["fixes"][1]
    assert got["trouble"] == got["headline"]


def test_access002_unreadable_run_among_readable(shared_root, fixtures_dir):
    """One run folder the board may not read: the others are runs, that one is listed with its reason."""
    require_unprivileged_python()
    readable_copy(fixtures_dir / "trl-grpo-small", shared_root / "trl-grpo-small")
    make_unreadable(shared_root / "trl-grpo-small")
    got = _scan_as_unprivileged(shared_root)
    assert got["runs"] == ["rlloggingboard-eval-poem", RUN]
    assert got["unreadable"] == {"trl-grpo-small": "permission denied"}
    assert got["status"] == "ok" and got["trouble"] is None


def test_access003_missing_root_and_not_a_folder(tmp_path):
    """A root that is gone (an unmounted share) or is a file: no runs, the state in words, no exception."""
    gone = scan_root(tmp_path / "unmounted")
    assert gone.runs == {} and gone.status == "missing: no such folder"
    assert (
        gone.problem.headline == f"The rollout folder {tmp_path / 'unmounted'} is not there: no such folder."
    )
    assert "Mount the rollout folder" in gone.problem.fixes()[0].text
    (tmp_path / "file").write_text("x")
    assert scan_root(tmp_path / "file").status == "unreadable: not a folder"


def test_access004_only_unreadable_folders(tmp_path):
    """A root whose only folders cannot be read tells the other pages why there is no run."""
    scan = scan_root(tmp_path)
    assert scan.trouble is None  # an empty root: nothing went wrong
    object.__setattr__(scan, "unreadable", {"a": "permission denied", "b": "permission denied"})
    assert scan.trouble == f"2 folders under {tmp_path} cannot be read."


def test_access005_lost_and_found_is_not_a_run(tmp_path):
    """A file system's lost+found (0700, root's) at the top of a mounted share is neither a run nor a
    problem."""
    (tmp_path / "lost+found").mkdir(mode=0o700)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.jsonl").write_text("")
    scan = scan_root(tmp_path)
    assert list(scan.runs) == ["run"] and scan.unreadable == {}


def test_access006_backoff_doubles_and_forgets():
    """A failure is remembered until its retry time; each failure in a row doubles the wait up to `most`;
    a success forgets it."""
    now = [0.0]
    b = Backoff(first=1.0, most=4.0, clock=lambda: now[0])
    assert b.pending("k") is None
    b.failed("k", "denied")
    assert b.pending("k") == "denied"
    now[0] = 1.0
    assert b.pending("k") is None  # retry time reached
    waits = []
    for _ in range(4):
        b.failed("k", "denied")
        start = now[0]
        while b.pending("k") is not None:
            now[0] += 0.5
        waits.append(now[0] - start)
    assert waits == [2.0, 4.0, 4.0, 4.0]
    b.failed("k", "denied")
    b.succeeded("k")
    assert b.pending("k") is None


def test_access007_scan_remembers_a_failed_root(tmp_path):
    """A root that failed is not listed again before its back-off ends: the remembered problem is the
    answer; after it, the runs that appeared meanwhile are found."""
    now = [0.0]
    memory = Backoff(first=2.0, most=60.0, clock=lambda: now[0])
    root = tmp_path / "share"
    assert scan_root(root, memory).status == "missing: no such folder"
    (root / "run").mkdir(parents=True)
    (root / "run" / "a.jsonl").write_text("")
    now[0] = 1.0
    assert scan_root(root, memory).status == "missing: no such folder"  # not tried again yet
    now[0] = 2.0
    scan = scan_root(root, memory)
    assert scan.status == "ok" and list(scan.runs) == ["run"]


def test_access008_reasons_in_words():
    """OS errors as a user reads them, and the root's state for /healthz."""
    assert reason_of(PermissionError(13, "Permission denied")) == "permission denied"
    assert reason_of(OSError(116, "Stale file handle")) == "stale file handle (a network share unmounted?)"
    assert status_of(FileNotFoundError(2, "No such file or directory")) == "missing: no such folder"
    assert status_of(OSError(116, "Stale file handle")).startswith("missing: ")
    assert status_of(OSError(5, "Input/output error")) == "unreadable: input/output error"
    p = AccessProblem.of("/nowhere", FileNotFoundError(2, "x"))
    assert p.gone and p.owner is None and p.detail.startswith("The board runs as uid ")


def test_access009_unreadable_file_in_a_run(shared_root):
    """A run file the board may not read is skipped with its reason in the manifest; the run's other file
    loads (its 200 of the run's 400 responses)."""
    require_unprivileged_python()
    make_unreadable(shared_root / RUN / "rank1.jsonl")
    cache = open_folder(writable=True)
    try:
        out = run_as_unprivileged(
            "import json; from data.ingest import ingest_run; from data.store import open_store\n"
            f"r = ingest_run({str(shared_root / RUN)!r}, {str(cache)!r}, ('<pad>',))\n"
            "s = open_store(r.store_dir)\n"
            "print(json.dumps({'samples': r.samples, 'unreadable': s.unreadable(),"
            " 'sources': sorted(set(s.scalars()['source']))}))"
        )
    finally:
        remove(cache)
    got = json.loads(out)
    assert got["unreadable"] == {"rank1.jsonl": "permission denied"}
    assert got["sources"] == ["rank0.jsonl"] and got["samples"] == 200
    lines = Unreadable.of(shared_root / RUN, "file", got["unreadable"]).lines
    mode = "0600" if os.geteuid() == 0 else "0000"
    assert lines == [
        f"rank1.jsonl: permission denied (owned by uid {os.geteuid()}, gid {os.getegid()}, mode {mode})"
    ]


def test_access010_failed_ingest_backs_off(tmp_path, fixtures_dir):
    """An ingest that fails (here: the cache folder is a file) is not started again on the next request,
    forced or not, before its back-off ends; the error stays shown meanwhile."""
    root = tmp_path / "root"
    readable_copy(fixtures_dir / RUN, root / RUN)
    (tmp_path / "cache").write_text("not a folder")
    board = Board(Settings(root=root, cache_dir=tmp_path / "cache", refresh_seconds=0.0))
    board._failures = Backoff(first=30.0, most=60.0)
    assert board.store(RUN, wait=5.0) is None
    first = board._threads[RUN]
    assert board.status(RUN).error.startswith(("FileExistsError", "NotADirectoryError"))
    for force in (False, True, False):
        board.refresh(RUN, force=force)
        assert board._threads[RUN] is first
    t0 = time.monotonic()
    assert board.store(RUN, wait=5.0) is None
    assert time.monotonic() - t0 < 1.0  # no wait for an ingest that is not tried again yet
