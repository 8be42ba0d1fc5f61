"""What a rollout file's full digest costs (data/ingest/digest.py): on one generated JSON-lines file of
--mb MB, the ingest with the digest ("after") and without it ("before": the digest in data.ingest.files
made a no-op, which is the code path of before), interleaved, each in a fresh cache:

- first read of the whole file; a refresh that finds nothing new; a refresh after one appended step;
- a refresh after the file's time moved at the same size (the one case that hashes the whole file again),
  and the whole-file hash alone;
- of each, the time spent in the digest (the bytes hashed as they are read, the same-size check; the
  load of a shared machine moves the totals more).

Prints one JSON object (medians of --rounds rounds, seconds).

    uv run python benchmarks/bench_digest.py /tmp/bench/digest --mb 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.ingest import digest, files, ingest_run  # noqa: E402

PADS = ("<pad>",)


def _lines(step: int, n: int) -> bytes:
    out = []
    for i in range(n):
        rec = {
            "prompt": f"prompt {step}-{i % 50} " + "p" * 200,
            "response": f"response {step}-{i} " + "r" * 600,
            "reward": (step * 31 + i) % 97 / 97,
            "step": step,
        }
        out.append(orjson.dumps(rec) + b"\n")
    return b"".join(out)


def _write(path: Path, mb: int) -> int:
    """A file of about ``mb`` MB, 128 lines a step; returns its step count."""
    step = 0
    with open(path, "wb") as f:
        while f.tell() < mb << 20:
            f.write(_lines(step, 128))
            step += 1
    return step


class _NoDigest:
    """The digest's part of a read as before it existed: nothing hashed, nothing kept."""

    def __init__(self, path, entry) -> None:
        pass

    def feed(self, offset: int, data: bytes) -> None:
        pass

    def finish(self, entry: dict, upto: int) -> None:
        pass


@contextmanager
def _without_digest():
    real = files.Running, files._edited_in_place
    files.Running = _NoDigest
    files._edited_in_place = lambda path, st, prev: False
    try:
        yield
    finally:
        files.Running, files._edited_in_place = real


def _timer(fn, spent: list[float]):
    def call(*args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            spent[0] += time.perf_counter() - t

    return call


@contextmanager
def _digest_timed(spent: list[float]):
    """The digest's work in data.ingest.files (hashing the bytes read, finishing, the same-size check),
    each adding its time to ``spent[0]``."""
    real = files.Running, files._edited_in_place

    class Timed(real[0]):
        __init__ = _timer(real[0].__init__, spent)
        feed = _timer(real[0].feed, spent)
        finish = _timer(real[0].finish, spent)

    files.Running, files._edited_in_place = Timed, _timer(real[1], spent)
    try:
        yield
    finally:
        files.Running, files._edited_in_place = real


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _round(src: Path, work: Path, steps: int) -> dict:
    """One round on a copy of ``src`` (the same bytes every round and side)."""
    shutil.rmtree(work, ignore_errors=True)
    run = work / "run"
    run.mkdir(parents=True)
    path = run / src.name
    shutil.copyfile(src, path)
    cache = work / "cache"
    spent = [0.0]
    out = {}

    def measure(key: str) -> None:
        spent[0] = 0.0
        with _digest_timed(spent):
            out[key] = _timed(lambda: ingest_run(run, cache, PADS))
        out[f"{key} (digest's share)"] = spent[0]

    measure("first_read")
    measure("refresh_nothing_new")
    with open(path, "ab") as f:
        f.write(_lines(steps, 128))
    measure("refresh_one_step_appended")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    measure("refresh_time_moved_same_size")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / "rank0.jsonl"
    steps = _write(src, args.mb)
    sides: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for side in order:
            if side == "before":
                with _without_digest():
                    sides[side].append(_round(src, args.work / side, steps))
            else:
                sides[side].append(_round(src, args.work / side, steps))
    entry: dict = {}
    digest.Running(src, entry).finish(entry, src.stat().st_size)
    whole = [_timed(lambda: digest.unchanged(src, entry)) for _ in range(args.rounds)]
    result: dict = {"file_mb": round(src.stat().st_size / 2**20, 1), "rounds": args.rounds}
    for key in sides["after"][0]:
        b = statistics.median(x[key] for x in sides["before"])
        a = statistics.median(x[key] for x in sides["after"])
        result[key] = {"before_s": round(b, 4), "after_s": round(a, 4), "ratio": round(a / b, 2)}
    result["whole_file_hash_s"] = round(statistics.median(whole), 4)
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))
    shutil.rmtree(args.work / "before", ignore_errors=True)
    shutil.rmtree(args.work / "after", ignore_errors=True)


if __name__ == "__main__":
    main()
