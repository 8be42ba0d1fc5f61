"""What hashing the bytes ingest already read saves (data/ingest/digest.py): on a run folder's JSON-lines
files, the CPU time of a file's full digest made by reading the file again (``_run`` from its start, what
ingest did before :class:`Running`) against the digest of blocks already in memory (``Running`` fed the
30 MB blocks ingest reads), interleaved, the median of --rounds rounds; and the hash functions' speed on
this CPU (BLAKE2b against SHA-256, which is fast only with the SHA extensions).

    uv run python benchmarks/bench_digest_read.py /tmp/bench/root/run --rounds 7
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.ingest import digest  # noqa: E402
from data.ingest.run import CHUNK_BYTES  # noqa: E402


def _blocks(files: list[Path]) -> list[tuple[Path, list[bytes]]]:
    out = []
    for p in files:
        with open(p, "rb") as f:
            out.append((p, list(iter(lambda f=f: f.read(CHUNK_BYTES), b""))))
    return out


def _read_again(files: list[Path]) -> None:
    for p in files:
        digest._run(p, 0, b"", p.stat().st_size)


def _fed(blocks: list[tuple[Path, list[bytes]]]) -> None:
    for p, pieces in blocks:
        running, at, entry = digest.Running(p, {}), 0, {}
        for b in pieces:
            running.feed(at, b)
            at += len(b)
        running.finish(entry, at)


def _cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    files = sorted(args.run.glob("*.jsonl"))
    sides: dict[str, list[float]] = {"read_again_s": [], "bytes_read_s": []}
    for r in range(args.rounds):
        blocks = _blocks(files)
        order = [("read_again_s", lambda: _read_again(files)), ("bytes_read_s", lambda b=blocks: _fed(b))]
        for key, fn in order if r % 2 == 0 else order[::-1]:
            sides[key].append(_cpu(fn))
        del blocks
    data = os.urandom(1 << 20) * 64
    speed = {}
    for name in ("blake2b", "sha256"):
        speed[f"{name}_mb_per_s"] = round(
            64 / min(_cpu(lambda n=name: hashlib.new(n, data).digest()) for _ in range(3))
        )
    result = {
        "mb": round(sum(p.stat().st_size for p in files) / 2**20, 1),
        "rounds": args.rounds,
        **{k: round(statistics.median(v), 4) for k, v in sides.items()},
        **speed,
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
