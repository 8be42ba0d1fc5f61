"""Ingest benchmark of a run written one file per step, as veRL's ``rollout_data_dir`` writes it.

    python benchmarks/bench_small_files.py WORK_DIR [--files 500] [--lines 64] [--bad-file 250] [--seed 0]

writes ``WORK_DIR/run/{step}.jsonl`` (veRL's names: ``input``, ``output``, ``score``, ``step``, plus the scalar
extras veRL adds, ``acc`` and ``pred``), ingests it into a fresh cache in a child process (as ``python app.py
ingest`` does) and prints one JSON object: files, lines, bytes, ingest seconds, files and MB per second.
``--bad-file N`` puts one invalid line in file N (each file that does not go together with the others
costs a part of its own). ``orjson_loop``: the same files read line by line with orjson, for scale.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from data.demo import prompt_pool  # noqa: E402

WORDS = "the a model answer is so therefore we get step check final value sum of".split()


def write_run(run: Path, files: int, lines: int, bad_file: int | None, seed: int) -> int:
    """One file a step of ``lines`` responses; returns the bytes written."""
    rng = random.Random(seed)
    prompts = prompt_pool(256)
    run.mkdir(parents=True, exist_ok=True)
    size = 0
    for step in range(1, files + 1):
        out = []
        for i in range(lines):
            score = rng.choice([0.0, 1.0])
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))
            row = {
                "input": prompts[(step * lines + i) % len(prompts)],
                "output": text,
                "score": score,
                "step": step,
                "acc": score > 0,
                "pred": str(rng.randint(0, 99)),
            }
            out.append(json.dumps(row))
        if step == bad_file:
            out[lines // 2] = out[lines // 2][:-10]  # cut: invalid JSON
        data = ("\n".join(out) + "\n").encode()
        (run / f"{step}.jsonl").write_bytes(data)
        size += len(data)
    return size


def orjson_loop(run: Path) -> dict:
    import orjson

    started = time.perf_counter()
    n = 0
    for f in sorted(run.glob("*.jsonl")):
        with open(f, "rb") as fh:
            for line in fh:
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError:
                    pass
                n += 1
    return {"lines": n, "seconds": round(time.perf_counter() - started, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--lines", type=int, default=64)
    ap.add_argument("--bad-file", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    run, cache = args.work / "run", args.work / "cache"
    shutil.rmtree(args.work, ignore_errors=True)
    size = write_run(run, args.files, args.lines, args.bad_file, args.seed)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "ingest", str(run), "--cache-dir", str(cache), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - started  # interpreter start included, as a user runs it
    summary = json.loads(proc.stdout)["runs"][0]
    loop = orjson_loop(run)
    print(
        json.dumps(
            {
                "files": args.files,
                "lines": summary["samples"] + summary["bad_lines"],
                "bad_lines": summary["bad_lines"],
                "bytes": size,
                "ingest_seconds_with_interpreter_start": round(seconds, 2),
                "files_per_s": round(args.files / seconds, 1),
                "mb_per_s": round(size / seconds / 1e6, 2),
                "orjson_loop": loop,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
