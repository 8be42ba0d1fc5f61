"""The server's first read of a run that a trainer is still writing: no step is shown half-written, and an
export of a store that is not whole yet says so."""

from __future__ import annotations

import csv
import io
import itertools
import json
import threading
import time
from pathlib import Path

import polars as pl

from data import export as export_mod
from tests.waiting import wait_until

RUN = "growing"
RANKS = 2
PER_STEP = 64  # responses per rank and step


def _line(rank: int, step: int, i: int) -> bytes:
    rec = {"prompt": f"p{rank}-{step}-{i} " + "x" * 300, "response": "y" * 400, "reward": i / PER_STEP}
    return json.dumps({**rec, "step": step}).encode() + b"\n"


class Writer:
    """A trainer writing one step at a time, each rank's lines in turn with short pauses (a rank file
    is mid-step most of the time), until stopped: still writing whenever the test reads, at a pace (about
    half a MB a second) that grows the files by a few steps a second, not by tens of MB each read must chew
    (before: 400 steps in ~8 s, then still files for the later reads)."""

    def __init__(self, run: Path, first: int):
        self.run, self.first = run, first
        self.stop = threading.Event()
        self.written = 0  # lines written to each rank file so far
        self.files = [open(run / f"rank{r}.jsonl", "ab", buffering=0) for r in range(RANKS)]  # noqa: SIM115
        self.thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        for step in itertools.count(self.first):
            for i in range(PER_STEP):
                for rank, f in enumerate(self.files):
                    f.write(_line(rank, step, i))
                self.written += 1
                if i % 8 == 0:
                    time.sleep(0.02)  # the thing under test: a trainer's pace, a rank file mid-step
                if self.stop.is_set():
                    return

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        for f in self.files:
            f.close()


def _run_root(tmp_path: Path, whole_steps: int) -> Path:
    run = tmp_path / "root" / RUN
    run.mkdir(parents=True)
    for rank in range(RANKS):
        with open(run / f"rank{rank}.jsonl", "wb") as f:
            for step in range(whole_steps):
                for i in range(PER_STEP):
                    f.write(_line(rank, step, i))
    return run


def test_firstingest001_no_half_written_step_while_the_trainer_writes(tmp_path, board_root):
    """Each first read of a run (a new worker, a new cache) while its files grow shows only whole steps
    (before, the first ingest committed what it found as complete: a step with some of its rows)."""
    run = _run_root(tmp_path, whole_steps=3)
    seen = []
    with Writer(run, first=3) as writer:
        for k in range(4):
            # Two more steps written (a loaded machine starves the writer): this read shows more than 3.
            lines = (k + 2) * PER_STEP
            wait_until(lambda n=lines: writer.written >= n, 120, f"the trainer to write step {k + 4}")
            b = board_root(run.parent, cache_dir=tmp_path / f"cache{k}")
            store = b.store(RUN, wait=60)
            assert store is not None
            steps = store.steps()
            seen.append(steps.height)
            assert writer.thread.is_alive(), "the trainer stopped writing: this read was of still files"
            partial = steps.filter(pl.col("n") != RANKS * PER_STEP)
            assert partial.height == 0, (k, partial.select("step", "n").rows())
    assert max(seen) > 3  # the runs shown did grow meanwhile


def test_firstingest002_a_still_run_is_shown_whole_at_once(tmp_path, board_root):
    """A run whose files are not being written shows every step after its first read, the last one too."""
    run = _run_root(tmp_path, whole_steps=3)
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(_line(0, 3, 0))  # a last step that only one rank reached: shown, the files are still
    b = board_root(run.parent, cache_dir=tmp_path / "cache")
    store = b.store(RUN, wait=60)
    assert store.steps().get_column("n").to_list() == [RANKS * PER_STEP] * 3 + [1]


def test_firstingest004_a_first_read_committed_before_the_look_is_waited_for(tmp_path, board_root):
    """A page that looks at a run just after this process's first read committed (its last step hidden
    until the files are seen still) still gets every step of a run nobody writes (before, only a look
    that found no store at all waited, and the page showed the run without its last step)."""
    from data.store import open_store

    run = _run_root(tmp_path, whole_steps=3)
    b = board_root(run.parent, cache_dir=tmp_path / "cache")
    b.refresh(RUN)
    first = wait_until(lambda: open_store(b.store_dir(RUN)), 120, "the first commit", interval=0.005)
    assert first is not None and first.visible_below is not None  # the first commit hides the last step
    assert b.status(RUN).settling
    store = b.store(RUN, wait=60)
    assert store.visible_below is None
    assert store.steps().get_column("n").to_list() == [RANKS * PER_STEP] * 3


def _export(client, fmt: str):
    r = client.get(f"/export?run={RUN}&step=all&format={fmt}")
    assert r.status_code == 200
    return r, r.get_data()


def test_firstingest003_an_export_of_an_unfinished_store_says_so(tmp_path, board_root, client):
    """An export taken while the run's last steps are hidden (still being written or read) says so in a
    header and in its last line; one of a whole store has neither (before: 200 with part of the run and no
    marker)."""
    run = _run_root(tmp_path, whole_steps=3)
    b = board_root(run.parent, cache_dir=tmp_path / "cache", refresh_seconds=0.2)
    with Writer(run, first=3) as writer:
        wait_until(lambda: writer.written >= 8, 60, "the trainer to write step 3")
        store = b.store(RUN, wait=60)
        assert store.visible_below is not None
        r, body = _export(client, "csv")
        head = r.headers.get(export_mod.INCOMPLETE_HEADER)
        assert head and "still being" in head
        rows = list(csv.reader(io.StringIO(body.decode())))
        assert rows[-1][0].startswith(export_mod.INCOMPLETE_MARK) and "still being" in rows[-1][0]
        assert len(rows) - 2 == store.scalars().height  # header, rows, the marker
        r, body = _export(client, "jsonl")
        last = json.loads(body.splitlines()[-1])
        assert list(last) == [export_mod.INCOMPLETE_KEY] and "still being" in last[export_mod.INCOMPLETE_KEY]
        r, body = _export(client, "parquet")
        assert r.headers.get(export_mod.INCOMPLETE_HEADER)
        meta = pl.read_parquet_metadata(io.BytesIO(body))
        assert "still being" in meta[export_mod.INCOMPLETE_KEY]
    # The files are still now: a look after SETTLE_SECONDS commits the hidden steps.

    def whole() -> bool:
        if b.status(RUN).running or b.store(RUN).visible_below is not None:
            b.refresh(RUN)
            return False
        return True

    wait_until(whole, 120, "a commit of every step once the files are still", interval=0.1)
    for fmt in ("csv", "jsonl", "parquet"):
        r, body = _export(client, fmt)
        assert export_mod.INCOMPLETE_HEADER not in r.headers
        assert (
            export_mod.INCOMPLETE_KEY.encode() not in body and export_mod.INCOMPLETE_MARK.encode() not in body
        )


def test_firstingest005_a_store_of_an_older_format_is_rebuilt_and_said(tmp_path, board_root):
    """A run whose only store an older version wrote is read again from its files into a new store: while
    it is, a page says it is rebuilding the store; then the runs page's notes say it was rebuilt, and the
    old store is gone (it is never opened)."""
    from data.store import STORE_FORMAT, open_store
    from data.store.reading import understood

    run = _run_root(tmp_path, whole_steps=3)
    cache = tmp_path / "cache"
    b = board_root(run.parent, cache_dir=cache)
    old = cache / f"{RUN}-older"
    (old / "parts").mkdir(parents=True)
    manifest = {
        "format": STORE_FORMAT - 1,
        "run": RUN,
        "run_path": str(run.resolve()),
        "pad_tokens": list(b.settings.pad_tokens),
        "parts": {},
        "files": {},
    }
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert open_store(old) is None  # another format: never read
    b.refresh(RUN)
    assert b.status(RUN).rebuilding == STORE_FORMAT - 1
    if open_store(b.store_dir(RUN)) is None:
        assert b.reading_text(RUN).startswith(f"Rebuilding run {RUN}'s store (written by an older version)")
    store = b.store(RUN, wait=10)
    assert store.steps().get_column("n").to_list() == [RANKS * PER_STEP] * 3
    assert not old.exists()
    assert any("Store rebuilt from the rollout files" in n for n in understood(store).notes)
