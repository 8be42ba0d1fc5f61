"""How far a live run's page lags behind the trainer writing it (issue 33, row 18).

A writer appends one step to a run's rank files every --every seconds; a server (gunicorn, one worker, on
127.0.0.1) is polled the way the app shell polls it, every refresh period (``RLBOARD_REFRESH_SECONDS``, the
shell's tick): one POST of the shell's live callback, whose answer carries the run's last step shown. A
step's lag is the time from its lines written (all ranks flushed) to the first poll answer showing it.

With ``--before-src DIR`` (a checkout of an older commit, e.g. ``git archive <commit> | tar -x -C DIR``) the
same run is served at the same time by that code and by this checkout, each with its own cache, polled in
turn, so both see the same writer and the same machine load. Prints one JSON object.

    git archive 5567471 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    uv run --group test python benchmarks/bench_live_lag.py /tmp/bench/live --before-src /tmp/before --seconds 120
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from benchmarks.generate import append_step  # noqa: E402
from benchmarks.load_test import start_gunicorn, stop_gunicorn  # noqa: E402

RUN = "live-run"
GEN = {"per_step": 32, "tokens": 40, "ranks": 2}
LIVE_OUT = (
    "..app-live-seen.data...app-live-new.style...app-live-new.children...app-live-reload.data"
    "...app-live.style...app-live-auto.value...app-live-tick.disabled.."
)


def _poll_body(tick: int) -> dict:
    """The shell's poll as the browser sends it on a tick (no page snapshot: the answer's ``seen`` is the
    run's current state)."""
    search = f"?run={RUN}"
    outputs = []
    for part in LIVE_OUT.strip(".").split("..."):
        cid, prop = part.rsplit(".", 1)
        outputs.append({"id": cid, "property": prop})
    return {
        "output": LIVE_OUT,
        "outputs": outputs,
        "inputs": [
            {"id": "app-location", "property": "href", "value": f"http://x/reward{search}"},
            {"id": "app-live-tick", "property": "n_intervals", "value": tick},
            [],
        ],
        "state": [
            {"id": "app-location", "property": "search", "value": search},
            {"id": "app-live-seen", "property": "data", "value": None},
            {"id": "app-live-reload", "property": "data", "value": 0},
            {"id": "app-live-auto", "property": "value", "value": False},
        ],
        "changedPropIds": ["app-live-tick.n_intervals"],
    }


def last_step(base: str, tick: int) -> int | None:
    r = requests.post(base + "/_dash-update-component", json=_poll_body(tick), timeout=30)
    r.raise_for_status()
    seen = r.json()["response"]["app-live-seen"]["data"]
    return None if seen is None else seen.get("last_step")


def start(src: Path, root: Path, cache: Path, refresh: float, log: Path) -> tuple[subprocess.Popen, str]:
    """One gunicorn worker of 4 threads (load_test's) looking every ``refresh`` seconds."""
    return start_gunicorn(root, cache, 1, 4, log, src, {"RLBOARD_REFRESH_SECONDS": str(refresh)})


def _lags(written: dict[int, float], polls: list[tuple[float, int | None]]) -> list[float | None]:
    """Per step written, the time to the first poll answer that shows it (None: none did)."""
    out = []
    for step, at in sorted(written.items()):
        seen = next((t for t, last in polls if t >= at and last is not None and last >= step), None)
        out.append(None if seen is None else seen - at)
    return out


def _summary(lags: list[float | None], every: float, refresh: float) -> dict:
    got = [x for x in lags if x is not None]
    return {
        "steps": len(lags),
        "never_shown": len(lags) - len(got),
        "lag_p50_s": round(statistics.median(got), 2) if got else None,
        "lag_mean_s": round(statistics.fmean(got), 2) if got else None,
        "lag_max_s": round(max(got), 2) if got else None,
        "lag_max_steps": round(max(got) / every, 1) if got else None,
        "lag_max_refresh_periods": round(max(got) / refresh, 2) if got else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--before-src", type=Path, help="a checkout of the code to compare with (served beside)")
    ap.add_argument("--seconds", type=float, default=120.0, help="how long the writer writes")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between two steps written")
    ap.add_argument("--refresh", type=float, default=5.0, help="RLBOARD_REFRESH_SECONDS: the poll period")
    ap.add_argument("--first-steps", type=int, default=10, help="steps written before the servers start")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    root = args.work / "root"
    run_dir = root / RUN
    for step in range(args.first_steps):
        append_step(run_dir, step, **GEN)
    sides = {"after": HERE}
    if args.before_src is not None:
        sides = {"before": args.before_src.resolve(), **sides}
    servers = {}
    try:
        for name, src in sides.items():
            servers[name] = start(
                src, root, args.work / f"cache-{name}", args.refresh, args.work / f"{name}.log"
            )
        # Both have read the steps written before (the first read of a run is not what is measured).
        for name, (_, base) in servers.items():
            deadline = time.monotonic() + 120
            while (last_step(base, 0) or -1) < args.first_steps - 1:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}: the first steps were not shown in 120 s")
                time.sleep(0.5)
        written: dict[int, float] = {}
        polls: dict[str, list] = {name: [] for name in servers}
        halt = threading.Event()

        def writer() -> None:
            step = args.first_steps
            end = time.monotonic() + args.seconds
            while time.monotonic() < end and not halt.wait(args.every):
                append_step(run_dir, step, **GEN)
                written[step] = time.monotonic()
                step += 1

        def poller(name: str, base: str, offset: float) -> None:
            tick = 1
            time.sleep(offset)  # the two sides' polls in turn, not at once
            while not halt.is_set():
                t = time.monotonic()
                polls[name].append((time.monotonic(), last_step(base, tick)))
                tick += 1
                halt.wait(max(0.0, t + args.refresh - time.monotonic()))

        threads = [threading.Thread(target=writer)]
        for i, (name, (_, base)) in enumerate(servers.items()):
            offset = i * args.refresh / len(servers)
            threads.append(threading.Thread(target=poller, args=(name, base, offset), daemon=True))
        for t in threads:
            t.start()
        threads[0].join()
        time.sleep(3 * args.refresh)  # the last steps written get their chance to show
        halt.set()
        for t in threads[1:]:
            t.join(timeout=60)
    finally:
        for proc, _ in servers.values():
            stop_gunicorn(proc)
    result = {
        "every_s": args.every,
        "refresh_s": args.refresh,
        "writer_s": args.seconds,
        "steps_per_write": GEN,
    }
    for name in servers:
        result[name] = _summary(_lags(written, polls[name]), args.every, args.refresh)
    if "before" in result and result["before"]["lag_max_s"] and result["after"]["lag_max_s"]:
        for k in ("lag_p50_s", "lag_mean_s", "lag_max_s"):
            result[f"ratio_{k}"] = round(result["after"][k] / result["before"][k], 2)
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
