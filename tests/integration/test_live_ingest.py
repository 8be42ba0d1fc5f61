"""Live runs: a trainer appends to a run's files (lines written in pieces, flushed half-way) while the store
is brought up to date again and again; no line may be lost or counted twice."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import orjson
import polars as pl

from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.store import open_store
from tests.waiting import wait_until

FILES = ("rank0.jsonl", "rank1.jsonl")
LINES_PER_FILE = 240
PER_STEP = 8


def _record(rank: int, i: int) -> bytes:
    rec = {
        "prompt": f"prompt r{rank} #{i} " + "x" * (i % 7),
        "response": f"response r{rank} #{i} ✓ " + "y" * (i % 11),
        "reward": round(((i * 7919 + rank) % 1000) / 500.0 - 1.0, 3),
        "step": i // PER_STEP,
        "logprobs": [-0.5, -1.25],
        "ref_logprobs": [-0.75, -1.0],
        "response_tokens": ["a", "b"],
    }
    return orjson.dumps(rec) + b"\n"


def _write(run_dir: Path, rank: int, seed: int, done: threading.Event, pause=None) -> None:
    """Append every line in 1-3 pieces, flushing each piece; some pieces stop right before the newline.
    ``pause(k)``, if given, is called at the k-th third of the lines (k = 1, 2)."""
    rng = random.Random(seed)
    with open(run_dir / FILES[rank], "ab", buffering=0) as f:
        for i in range(LINES_PER_FILE):
            if pause is not None and i and i % (LINES_PER_FILE // 3) == 0:
                pause(i // (LINES_PER_FILE // 3))
            line = _record(rank, i)
            kind = rng.random()
            if kind < 0.3:
                cuts = [len(line) - 1]  # complete JSON object, newline still to come
            elif kind < 0.7:
                cuts = sorted(rng.sample(range(1, len(line) - 1), 2))
            else:
                cuts = []
            start = 0
            for cut in [*cuts, len(line)]:
                f.write(line[start:cut])
                start = cut
                if cut < len(line):
                    time.sleep(rng.uniform(0.0, 0.004))  # the thing under test: a line caught half-written
            if rng.random() < 0.2:
                time.sleep(rng.uniform(0.0, 0.01))  # the thing under test: a trainer's uneven pace
    done.set()


def _store_rows(store) -> pl.DataFrame:
    frames = [
        pl.read_parquet(path, columns=["source", "line", "prompt", "response", "reward", "step"])
        for path in store.part_files()
    ]
    return pl.concat(frames).sort("source", "line")


def _file_rows(run_dir: Path) -> list[tuple[str, int, dict]]:
    out = []
    for name in FILES:
        data = (run_dir / name).read_bytes()
        assert data.endswith(b"\n")
        for n, raw in enumerate(data.split(b"\n")[:-1], start=1):
            out.append((name, n, orjson.loads(raw)))
    return out


def test_live001_concurrent_writer_no_lost_or_duplicated_lines(tmp_path):
    """Two ingesters (as two gunicorn workers would) re-read a run while two writers append lines in
    pieces; afterwards the store holds each line of the files exactly once, with the same content."""
    run_dir = tmp_path / "rollouts" / "live-run"
    run_dir.mkdir(parents=True)
    cache = tmp_path / "cache"
    for name in FILES:
        (run_dir / name).touch()
    done = [threading.Event() for _ in FILES]
    ingests = threading.Condition()
    calls = 0

    def pause(k: int) -> None:  # a third of the lines written: wait for an ingest of them (however slow)
        with ingests:
            ingests.wait_for(lambda: calls >= k + 1, timeout=60)

    writers = [
        threading.Thread(target=_write, args=(run_dir, r, 100 + r, done[r], pause), daemon=True)
        for r in range(len(FILES))
    ]
    stop = threading.Event()
    seen_rows: list[int] = []
    errors: list[BaseException] = []

    def second_ingester():
        try:
            while not stop.is_set():
                ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS, wait=False)
                time.sleep(0.03)  # leaves the lock free now and then (filelock polls every 50 ms)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    other = threading.Thread(target=second_ingester, daemon=True)
    # A first ingest of the empty run before the writers start: its one-time start-up cost (thread pools,
    # first Polars calls) must not use up the writing window (a clean CI run saw only 2 ingests in it).
    ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)
    for t in (*writers, other):
        t.start()
    while not all(d.is_set() for d in done):
        res = ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)
        seen_rows.append(res.samples)
        with ingests:
            calls += 1
            ingests.notify_all()
        time.sleep(0.005)  # the thing under test: ingests at a pace, among the writes
    stop.set()
    other.join(timeout=30)
    for t in writers:
        t.join(timeout=30)
    final = ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)
    assert not errors, errors
    assert calls >= 3, "the ingest should have run several times during the writes"

    store = open_store(final.store_dir)
    rows = _store_rows(store)
    expected = _file_rows(run_dir)
    assert rows.height == len(expected) == len(FILES) * LINES_PER_FILE
    keys = list(zip(rows["source"].to_list(), rows["line"].to_list(), strict=True))
    assert len(set(keys)) == len(keys), "a line was counted twice"
    assert set(keys) == {(s, n) for s, n, _ in expected}, "a line was lost"
    by_key = {(r["source"], r["line"]): r for r in rows.iter_rows(named=True)}
    for source, n, rec in expected:
        got = by_key[(source, n)]
        assert (got["prompt"], got["response"], got["reward"], got["step"]) == (
            rec["prompt"],
            rec["response"],
            rec["reward"],
            rec["step"],
        ), (source, n)
    assert store.scalars().height == len(expected)
    assert store.steps().get_column("n").sum() == len(expected)
    issues = store.issues()
    assert issues.filter(pl.col("severity") != "note").height == 0, issues
    # The ingest saw the run grow (it never jumped from empty to full in one call).
    assert 0 < min(s for s in seen_rows if s) < len(expected)


def _wait_idle(board, run: str) -> None:
    """Wait until the run's ingest thread has ended (not only flagged itself done: a refresh made while
    the thread is still alive is skipped, which would make the next step of a test race with it)."""
    wait_until(lambda: not board.status(run).running, 120, f"the ingest of {run} to end", interval=0.02)
    thread = board._threads.get(run)
    if thread is not None:
        thread.join(timeout=120)
        assert not thread.is_alive(), f"the ingest thread of {run} lives on"


def _board_of_one_file(tmp_path: Path):
    """A run of one file of 8 lines and a board that may check it at every look: ``(run folder, board)``."""
    from dataclasses import replace

    from data import service

    run_dir = tmp_path / "root" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / FILES[0]).write_bytes(b"".join(_record(0, i) for i in range(8)))
    settings = service.load_settings({})
    return run_dir, service.Board(
        replace(settings, root=tmp_path / "root", cache_dir=tmp_path / "c", refresh_seconds=0.0)
    )


def test_live002_a_growing_run_is_read_at_the_next_look(tmp_path, monkeypatch):
    """A run whose files changed since the last look is read at that look, its last step hidden (a trainer
    may still be writing it), and the same read shows that step once the files stay still for
    SETTLE_SECONDS after its cut; a file that grows during that wait is read again at once, up to a new
    cut, and settles again. (Before, a growing run was read only once its files had been still between two looks, else after
    30 s: a page 10 steps behind a writer of one step every 2 s.)"""

    from data import service

    monkeypatch.setattr(service, "SETTLE_SECONDS", 0.3)
    run_dir, b = _board_of_one_file(tmp_path)
    assert b.store("run", wait=30).scalars().height == 8
    _wait_idle(b, "run")
    real, reads = service.ingest_run, []
    append_during_settle: list[bytes] = []

    def observed(*args, **kw):
        res = real(*args, **kw)
        store = open_store(res.store_dir)
        reads.append((kw["complete"], store.all_scalars().height, store.scalars().height))
        if append_during_settle:  # the trainer writes on while the read waits for the files to settle
            with open(run_dir / FILES[0], "ab") as f:
                f.write(append_during_settle.pop())
        return res

    monkeypatch.setattr(service, "ingest_run", observed)
    with open(run_dir / FILES[0], "ab") as f:
        f.write(b"".join(_record(0, i) for i in range(8, 12)))  # step 1, half of it
    b.refresh("run")  # the files changed since the last look: read now, step 1 hidden
    _wait_idle(b, "run")
    assert reads == [(False, 12, 8), (True, 12, 12)]
    assert b.store("run", wait=0).steps().get_column("step").to_list() == [0, 1]

    reads.clear()
    append_during_settle.append(_record(0, 13))
    with open(run_dir / FILES[0], "ab") as f:
        f.write(_record(0, 12))
    b.refresh("run")
    _wait_idle(b, "run")
    # Still growing after the cut: read again at once up to a new cut (step 1 still the last, hidden),
    # shown once the files stayed still after that one.
    assert reads == [(False, 13, 8), (False, 14, 8), (True, 14, 14)]
    reads.clear()
    b.refresh("run")  # nothing changed since: no read
    _wait_idle(b, "run")
    assert reads == [] and b.store("run", wait=0).scalars().height == 14


def test_live003_ingest_reads_a_cut_of_the_files(tmp_path, monkeypatch):
    """Lines a trainer appends after the board decided to read a run (here: a whole step written to both
    rank files between the decision and the read) wait for the next read: no step is committed half-way."""
    from dataclasses import replace

    from data import service

    monkeypatch.setattr(service, "SETTLE_SECONDS", 0.0)
    run_dir = tmp_path / "root" / "run"
    run_dir.mkdir(parents=True)
    for r, name in enumerate(FILES):
        (run_dir / name).write_bytes(b"".join(_record(r, i) for i in range(PER_STEP)))
    settings = replace(
        service.load_settings({}), root=tmp_path / "root", cache_dir=tmp_path / "c", refresh_seconds=0.0
    )
    b = service.Board(settings)
    real = service.ingest_run

    def lingering(*args, **kw):  # the thread outlives its commit, as it does on a loaded machine
        res = real(*args, **kw)
        time.sleep(0.3)  # the thing under test: a thread that outlives its commit
        return res

    monkeypatch.setattr(service, "ingest_run", lingering)
    assert b.store("run", wait=30).scalars().height == 2 * PER_STEP
    # store() returns as soon as the first commit is readable; the ingest's thread may live on a moment
    # (long under load), and a refresh while it lives is skipped: the burst below would then never happen.
    _wait_idle(b, "run")

    bursts, seen = [], []

    def burst_then_ingest(*args, **kw):
        if not bursts:
            bursts.append(1)
            for r, name in enumerate(FILES):  # the next step lands while the ingest starts
                with open(run_dir / name, "ab") as f:
                    f.write(b"".join(_record(r, i) for i in range(PER_STEP, 2 * PER_STEP)))
        res = real(*args, **kw)
        seen.append(open_store(res.store_dir).all_scalars().height)
        return res

    monkeypatch.setattr(service, "ingest_run", burst_then_ingest)
    for (
        name
    ) in FILES:  # touched (a trainer's flush of nothing): a still run read whole is checked on a change
        os.utime(run_dir / name)
    b.refresh("run")  # the files changed since the last look: read them at once, up to that cut
    _wait_idle(b, "run")
    assert bursts == [1]
    # The read took none of the step written after its cut; the files grew while it settled, so it read
    # again at once up to a new cut (the new step hidden), and showed that step once the files were still.
    assert seen == [2 * PER_STEP, 4 * PER_STEP, 4 * PER_STEP]
    steps = open_store(b.store_dir("run")).steps()
    assert steps.get_column("n").to_list() == [2 * PER_STEP, 2 * PER_STEP]


def test_live004_a_still_run_is_not_checked_again_until_something_changes(tmp_path, monkeypatch):
    """Once a still run was read whole, looks at it start no check while nothing changed; a check is made
    again when a file grows, is made readable again (chmod), the run's settings file appears, or the store
    changes under it (its cache folder cleared)."""
    import shutil

    from data import service

    monkeypatch.setattr(service, "SETTLE_SECONDS", 0.0)
    run_dir, b = _board_of_one_file(tmp_path)
    real, calls = service.ingest_run, []

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(service, "ingest_run", counted)

    def checks() -> int:
        """The checks three looks start."""
        before = len(calls)
        for _ in range(3):
            b.refresh("run")
            _wait_idle(b, "run")
        return len(calls) - before

    assert b.store("run", wait=30).scalars().height == 8
    _wait_idle(b, "run")
    checks()  # (a first look of this signature may read it whole)
    assert checks() == 0
    with open(run_dir / FILES[0], "ab") as f:
        f.write(_record(0, 8))
    assert checks() >= 1 and b.store("run", wait=0).scalars().height == 9
    assert checks() == 0
    (run_dir / FILES[0]).chmod(0o600)
    assert checks() == 1
    (run_dir / "rlboard.toml").write_text('dialect = "contract"\n')
    assert checks() == 1
    shutil.rmtree(b.store_dir("run"))
    assert checks() == 1 and b.store("run", wait=0).scalars().height == 9
    assert checks() == 0


def _assert_three_lines(run_dir: Path, cache: Path) -> None:
    """A last read of the run: rank0's records 0-2 stored as its lines 1, 2, 3, and no unusable line."""
    final = ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)
    rows = _store_rows(open_store(final.store_dir))
    assert rows.select("line").to_series().to_list() == [1, 2, 3]
    assert rows.get_column("prompt").to_list() == [orjson.loads(_record(0, i))["prompt"] for i in range(3)]
    issues = open_store(final.store_dir).issues()
    assert issues.filter(pl.col("severity") != "note").height == 0, issues


def test_live005_a_newline_read_alone_after_a_taken_last_line(tmp_path):
    """Line 2 is read as a complete JSON object still without its newline; the next look finds only that
    newline; the one after, line 3. Line 3 is line 3 (once the newline was taken, the offset it left behind
    made the next read count it again as a blank line 3 and number the real one 4: the concurrent test's
    one lost line in a full suite, line 161 stored as 241)."""
    run_dir = tmp_path / "rollouts" / "live-run"
    run_dir.mkdir(parents=True)
    path = run_dir / "rank0.jsonl"
    cache = tmp_path / "cache"

    def look() -> None:
        ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)

    path.write_bytes(_record(0, 0) + _record(0, 1).rstrip(b"\n"))
    look()
    with open(path, "ab") as f:
        f.write(b"\n")
    look()
    with open(path, "ab") as f:
        f.write(_record(0, 2))
    look()
    _assert_three_lines(run_dir, cache)


def test_live006_whitespace_then_the_newline_after_a_taken_last_line(tmp_path):
    """After a taken last line (no newline yet): spaces alone, then a carriage return and the newline, then
    the next lines, each read by its own look. The spaces and the CR belong to the taken line (no error,
    no blank line counted), and the next lines keep their numbers (2, 3)."""
    run_dir = tmp_path / "rollouts" / "live-run"
    run_dir.mkdir(parents=True)
    path = run_dir / "rank0.jsonl"
    cache = tmp_path / "cache"
    path.write_bytes(_record(0, 0).rstrip(b"\n"))
    for more in (b"  ", b"\t\r\n", _record(0, 1), _record(0, 2)):
        ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)
        with open(path, "ab") as f:
            f.write(more)
    _assert_three_lines(run_dir, cache)
