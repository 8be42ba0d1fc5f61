"""A big TensorBoard event file beside a run's rollouts (issue 33, row 9): how long the reward page's
trainer callback takes and how much memory the worker holds.

The event file is written with TensorBoard's own writer (``EventFileWriter``: legacy ``simple_value``
scalars, one event a value, as ``torch.utils.tensorboard`` and the Hugging Face Trainer write them) into
``<work>/root/run/runs/<date>_host/``, about --mb MB (kept for later runs: writing it takes minutes, the
writer checks its CRCs in pure Python). Each side runs in a child process of its own (``--before-src``:
a checkout of the older code; this checkout is "after"), sides in turn, --rounds times: it ingests the
run's small rollouts, then POSTs the trainer callback through the Flask test client and times it, again
every 0.5 s until the card holds the scalars (the "after" code answers at once and reads in the
background), and reports the time of the first answer, the time until the scalars were shown, and the
process's peak RSS (``ru_maxrss``) over the baseline before the first callback. Prints one JSON object.

    git archive 5567471 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    uv run --group test python benchmarks/bench_tensorboard.py /tmp/bench/tb --mb 90 --before-src /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TAGS = tuple(f"train/{k}" for k in ("loss", "learning_rate", "grad_norm", "reward", "kl", "entropy",
                                    "clip_ratio", "epoch", "rewards/accuracy/mean", "completions/mean_length"))  # fmt: skip


def write_events(folder: Path, mb: int) -> Path:
    """An event file of about ``mb`` MB of scalars (every tag at every step), by TensorBoard's writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    w = EventFileWriter(str(folder), max_queue_size=1024, flush_secs=30)
    path = Path(w._file_name)  # noqa: SLF001 - the writer names its file itself
    step = 0
    while True:
        for i, tag in enumerate(TAGS):
            v = summary_pb2.Summary.Value(tag=tag, simple_value=((step * 7 + i) % 1000) / 1000)
            w.add_event(
                event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[v]))
            )
        step += 1
        if step % 2000 == 0:
            w.flush()
            if path.stat().st_size >= mb << 20:
                break
    w.close()
    return path


CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
root, cache = Path(sys.argv[1]), Path(sys.argv[2])
os.environ.update(RLBOARD_ROOT=str(root), RLBOARD_CACHE_DIR=str(cache), RLBOARD_DEMO="0")
from data import service
from data.ingest import ingest_run
from data.config import load_settings
settings = load_settings({})
service.configure(settings)
ingest_run(root / "run", cache, settings.pad_tokens)
import app
client = app.server.test_client()
client.get("/reward?run=run")
out = "..reward-trainer-fig.figure...reward-trainer-notes.children...reward-agreement.children.."
outputs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1]} for p in out.strip(".").split("...")]
body = {"output": out, "outputs": outputs, "changedPropIds": ["reward-run.data"], "state": [],
        "inputs": [{"id": "reward-run", "property": "data", "value": "run"},
                   {"id": "reward-trainer", "property": "value", "value": None}]}
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
base = rss()
t0 = time.perf_counter()
calls = []
while True:
    t = time.perf_counter()
    r = client.post("/_dash-update-component", json=body)
    calls.append(time.perf_counter() - t)
    fig = r.get_json()["response"]["reward-trainer-fig"]["figure"]
    points = sum(1 for tr in fig.get("data", []) if tr.get("y") is not None)  # traces drawn
    if points or time.perf_counter() - t0 > 900:
        break
    time.sleep(0.5)
print(json.dumps({"first_callback_s": calls[0], "slowest_callback_s": max(calls), "callbacks": len(calls),
                  "until_shown_s": time.perf_counter() - t0, "traces_shown": points,
                  "peak_rss_mb": rss(), "rss_over_baseline_mb": rss() - base}))
"""


def run_side(src: Path, root: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLBOARD_")}
    env["PYTHONPATH"] = str(src)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(cache)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{src}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--mb", type=int, default=90)
    ap.add_argument("--before-src", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from benchmarks.generate import append_step

    root = args.work / "root"
    run = root / "run"
    tb = run / "runs" / "Nov29_07-00-00_host"
    if not any(tb.glob("events.out.tfevents.*")):
        for step in range(8):
            append_step(run, step, per_step=16, tokens=20, ranks=1)
        t = time.perf_counter()
        write_events(tb, args.mb)
        print(f"wrote the event file in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    size = sum(p.stat().st_size for p in tb.glob("events.out.tfevents.*"))
    sides = {"after": HERE}
    if args.before_src is not None:
        sides = {"before": args.before_src.resolve(), **sides}
    got: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name in sides if r % 2 == 0 else reversed(list(sides)):
            cache = args.work / f"cache-{name}"
            got[name].append(run_side(sides[name], root, cache))
            print(name, got[name][-1], file=sys.stderr)
    result: dict = {"events_mb": round(size / 2**20, 1), "rounds": args.rounds}
    for name, rows in got.items():
        result[name] = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
    if "before" in got:
        for k in (
            "first_callback_s",
            "slowest_callback_s",
            "until_shown_s",
            "peak_rss_mb",
            "rss_over_baseline_mb",
        ):
            b, a = result["before"][k], result["after"][k]
            result[f"ratio_{k}"] = round(a / b, 3) if b else None
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
