"""Scaling benchmark: the same run at 1x, 4x and 10x the default size, served by real gunicorn.

    uv run python benchmarks/bench_scale.py --work /tmp/bench-scale [--scales 1 4 10] [--src DIR]
        [--label after] [--no-ingest] [--reuse-callbacks] [--keep] [--per-step 512] [--tokens 60] [--runs DIR [--generate-only]]

Per scale (``500 * scale`` steps of ``--per-step`` responses of ``--tokens`` tokens, 4 rank files, made with
``benchmarks/generate.py``; 1x = 256,000 responses), it measures:

- ingest (``app.py ingest`` in a child process under ``/usr/bin/time -v``): wall seconds and peak RSS;
  the store's size on disk;
- a gunicorn worker (``gunicorn.conf.py``, 1 worker of 4 threads, so that it serves every request): the
  pages' real callbacks, recorded from headless Chromium as it loads each page (the POSTs to
  ``/_dash-update-component``, see ``benchmarks/load_test.capture``), replayed one after the other
  against a fresh server with an empty results cache and no text index (``cold``), then again
  ``--warm-passes`` times (``warm``: the median pass, the steady state); a page's time is the sum of its callbacks' (and the slowest one is given, and the worker's
  CPU time over them), the median of ``--rounds`` rounds of fresh servers, one per scale in each round, the
  scales' order turned round every other round (so that the machine's drifting speed falls on each
  alike); after each page the worker is let go idle, and the seconds that took are given apart
  (``background``: a search over every step counts its matches after its first answer), so that work a
  page leaves running is not timed in the next page's figure;
- the worker's resident memory after serving every page twice (at once and 6 s later), and after the
  export;
- ``/export?run=run&step=all&format=csv``: time to the first byte and to the first row, total time and
  size.

``--drop-caches`` (root) empties the kernel's page cache before each fresh server starts, so that its cold
pages read the store from the disk: without it, which store the page cache holds depends on what ran last
(a side measured right after the other side's server, or after its own ingest), and the cold figures with it.

``--first-page`` adds, in each round, each page alone on its own fresh server (after ``--drop-caches``): the
``first`` figure, what a user waits who opens that page first after a restart. In the replay of every page
in turn, the library code a page is the first to run is read from the disk in that page's cold figure, so
work taken out of one page (the runs page) moves that cost onto the next (the reward page).

``--runs DIR`` takes the source runs from ``DIR/x<scale>/root`` (made there if absent, e.g. once with
``--generate-only``, then only read), so that several benchmarks share one copy of a 10x run.

``--src`` runs another source tree of the app (e.g. ``git archive main | tar -x -C DIR``: the code
"before" a change) with this checkout's interpreter. ``--no-ingest`` reuses a store already built in
``--work`` (ingest figures are then left out); ``--reuse-callbacks`` replays the callbacks an earlier invocation
of the same ``--label`` recorded there, instead of capturing them again (the capture varies by one callback
between invocations, which moves a page's sum). The load average of the machine is printed beside each
figure: this machine has 2 cores shared with other work, so figures taken under load are not comparable.
Generated files are kept in ``--work`` between invocations only with ``--keep``. A deployed image holds its
dependencies' bytecode: without it (``PYTHONDONTWRITEBYTECODE`` set when they were installed) a cold page
also compiles what it imports first, so the benchmark says so (``uv sync --compile-bytecode`` mends it).

Prints one JSON object (and, on stderr, a Markdown table with the slopes: the exponent ``k`` of
``figure ~ responses^k`` between the smallest and the largest scale; 0 = flat, 1 = proportional).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RUN = "run"
REF = "ref"  # a small second run, so that the compare page has two runs
BASE_STEPS = 500
CALLBACK_PATH = "/_dash-update-component"
SEARCH = "(?i)whales"  # a word of the generator's vocabulary: a regex search over every step


def load() -> float:
    return round(os.getloadavg()[0], 2)


# ---- the run ---------------------------------------------------------------------------------------------


def make_run(run_dir: Path, steps: int, per_step: int, tokens: int) -> dict:
    """Write the run with benchmarks/generate.py (unless it is there already) and age its files by an
    hour: a server's first look at files changed within a minute hides their last step until they are
    seen still, which would commit a new store version mid-benchmark."""
    marker = run_dir / ".generated.json"
    want = {"steps": steps, "per_step": per_step, "tokens": tokens}
    if marker.exists() and json.loads(marker.read_text()).get("params") == want:
        return json.loads(marker.read_text())["report"]
    shutil.rmtree(run_dir, ignore_errors=True)
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "generate.py"), str(run_dir), "--steps", str(steps),
         "--per-step", str(per_step), "--tokens", str(tokens), "--ranks", "4"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads(out.stdout.strip().splitlines()[-1])
    old = time.time() - 3600
    for f in run_dir.glob("*.jsonl"):
        os.utime(f, (old, old))
    marker.write_text(json.dumps({"params": want, "report": report}))
    return report


def drop_page_cache() -> None:
    """Empty the kernel's page cache (root): files read next come from the disk."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def ingest(src: Path, run_dir: Path, cache: Path) -> dict:
    """``app.py ingest`` from scratch in a child process: wall seconds and peak RSS (``time -v``)."""
    for store in cache.glob(f"{run_dir.name}-*"):
        shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    before = load()
    out = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, str(src / "app.py"), "ingest", str(run_dir),
         "--cache-dir", str(cache), "--json"],
        cwd=src, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    return {
        "seconds": round(wall, 1),
        "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None,
        "load": [before, load()],
    }


def store_dir(cache: Path, run: str) -> Path:
    dirs = [d for d in cache.glob(f"{run}-*") if d.is_dir() and (d / "manifest.json").exists()]
    if len(dirs) != 1:
        raise SystemExit(f"expected one store of {run!r} in {cache}, found {dirs}")
    return dirs[0]


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def targets(store: Path) -> dict:
    """The run's last step, the first response of that step and its most frequent prompt (read from the
    store's files directly, so that any version of the app's code can be measured)."""
    import polars as pl

    m = json.loads((store / "manifest.json").read_text())
    steps = pl.read_parquet(store / m["steps_file"])
    last = int(steps.get_column("step").max())
    scalars = pl.scan_parquet(str(store / "scalars" / "*.parquet"), missing_columns="insert")
    sample = (
        scalars.filter(pl.col("step") == last)
        .select("sample_id", "source", "line")
        .sort("source", "line")
        .collect()
        .item(0, "sample_id")
    )
    prompt = (
        scalars.filter(pl.col("step") < 50)
        .group_by("prompt_key")
        .len()
        .sort("len", "prompt_key", descending=[True, False])
        .collect()
        .item(0, "prompt_key")
    )
    return {"last_step": last, "sample": sample, "prompt": prompt, "responses": int(steps["n"].sum())}


def page_urls(t: dict) -> dict[str, str]:
    from urllib.parse import quote

    return {
        "runs": "/",
        "reward": f"/reward?run={RUN}",
        "responses": f"/responses?run={RUN}",
        "responses_all_sorted": f"/responses?run={RUN}&step=all&sort=reward&order=desc",
        "responses_all_search": f"/responses?run={RUN}&step=all&q={quote(SEARCH)}",
        "tokens": f"/tokens?run={RUN}&sample={t['sample']}",
        "prompts": f"/prompts?run={RUN}",
        "prompt": f"/prompts?run={RUN}&prompt={t['prompt']}",
        "compare": f"/compare?run={RUN}&run={REF}",
    }


# ---- the server ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``gunicorn -c gunicorn.conf.py app:server`` of ``src``, one worker, on a loopback port."""

    def __init__(self, src: Path, root: Path, cache: Path, log: Path, workers: int = 1, threads: int = 4):
        self.src, self.log, self.port = src, log, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "GUNICORN_"))}
        env.update(
            RLBOARD_ROOT=str(root),
            RLBOARD_CACHE_DIR=str(cache),
            RLBOARD_HOST="127.0.0.1",
            RLBOARD_PORT=str(self.port),
            RLBOARD_DEMO="0",
            RLBOARD_WORKERS=str(workers),
            RLBOARD_THREADS=str(threads),
            RLBOARD_LOG_LEVEL="warning",
        )
        self.env = env
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        import requests

        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", str(self.src / "gunicorn.conf.py"), "app:server"],
                cwd=self.src, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"gunicorn exited ({self.proc.returncode}); see {self.log}")
            try:
                if requests.get(self.base + "/healthz", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.__exit__()
        raise SystemExit(f"gunicorn not healthy in 120 s; see {self.log}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)

    def worker_memory(self) -> dict:
        """Resident and peak resident memory (MB) of the worker processes (gunicorn's children; the search
        helpers a worker starts are counted apart)."""
        import psutil

        out = {"rss_mb": [], "peak_mb": [], "helpers_rss_mb": 0}
        for w in psutil.Process(self.proc.pid).children():
            status = Path(f"/proc/{w.pid}/status").read_text()
            hwm = re.search(r"VmHWM:\s+(\d+) kB", status)
            out["rss_mb"].append(round(w.memory_info().rss / 2**20))
            out["peak_mb"].append(round(int(hwm.group(1)) / 1024) if hwm else None)
            out["helpers_rss_mb"] += round(
                sum(h.memory_info().rss for h in w.children(recursive=True)) / 2**20
            )
        return out

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) used so far by the workers and the search helpers they started."""
        import psutil

        total = 0.0
        for w in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                t = w.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system
        return total

    def settle(self, window: float = 0.3, busy: float = 0.05, limit: float = 120.0) -> float:
        """Seconds until the server is idle (less than ``busy`` CPU seconds over ``window``): the work a
        page's answers left running (a search's count in the background), at most ``limit``."""
        t0 = time.perf_counter()
        last = self.cpu_seconds()
        while time.perf_counter() - t0 < limit:
            time.sleep(window)
            now = self.cpu_seconds()
            if now - last < busy:
                break
            last = now
        return round(max(0.0, time.perf_counter() - t0 - window), 2)


def clear_server_caches(cache: Path) -> None:
    """What a fresh server would not find: the shared results cache and the text indexes beside stores."""
    shutil.rmtree(cache / "results-cache", ignore_errors=True)
    for d in cache.glob("*.text-index"):
        shutil.rmtree(d, ignore_errors=True)


def replay(base: str, bodies: dict[str, list[dict]], server: Server | None = None) -> dict:
    """Each page's recorded callbacks POSTed one after the other: per page the total and slowest (ms), and
    the worker's resident memory after it (MB)."""
    import requests

    session = requests.Session()
    out = {}
    for page, calls in bodies.items():
        times, errors = [], []
        start_load = load()
        cpu0 = server.cpu_seconds() if server is not None else None
        for body in calls:
            t0 = time.perf_counter()
            r = session.post(base + CALLBACK_PATH, json=body, timeout=900)
            times.append(time.perf_counter() - t0)
            if r.status_code not in (200, 204):
                errors.append(f"{r.status_code} {body['output'][:50]}")
        out[page] = {
            "ms": round(sum(times) * 1000, 1),
            "slowest_ms": round(max(times, default=0) * 1000, 1),
            "callbacks": len(calls),
            "errors": errors,
            "load": start_load,
            # The worker's CPU time over the page's callbacks: less moved by other work on the machine
            # than their wall time (which is what a user waits, and the figure the table gives).
            "cpu_ms": round((server.cpu_seconds() - cpu0) * 1000, 1) if server is not None else None,
            "rss_mb_after": max(server.worker_memory()["rss_mb"]) if server is not None else None,
        }
        # What the answers left running (a search's count) is timed apart, not in the next page's figure.
        out[page]["background_s"] = server.settle() if server is not None else None
    return out


IDLE_SECONDS = 6.0


def median_pages(rounds: list[dict]) -> dict:
    """Per page, the round whose time is the median of the rounds' (its other figures along)."""
    out = {}
    for page in rounds[0]:
        ranked = sorted((r[page] for r in rounds), key=lambda x: x["ms"])
        out[page] = ranked[len(ranked) // 2]
    return out


def export(base: str, timeout: float) -> dict:
    """``/export?run=run&step=all&format=csv`` streamed: first byte, total, size, how it ended."""
    import requests

    t0 = time.perf_counter()
    first = first_row = None
    size = lines = 0
    ended = "complete"
    start_load = load()
    try:
        with requests.get(
            base + "/export",
            params={"run": RUN, "step": "all", "format": "csv"},
            stream=True,
            timeout=timeout,
        ) as r:
            status = r.status_code
            for chunk in r.iter_content(1 << 16):
                if first is None and chunk:
                    first = time.perf_counter() - t0
                if first_row is None:
                    lines += chunk.count(b"\n")
                    if lines >= 2:  # the header and a row
                        first_row = time.perf_counter() - t0
                size += len(chunk)
                if time.perf_counter() - t0 > timeout:
                    ended = f"stopped by the benchmark after {timeout:.0f} s"
                    break
    except requests.RequestException as e:
        status, ended = None, f"{type(e).__name__}: {str(e)[:120]}"
    return {
        "status": status,
        "first_byte_s": None if first is None else round(first, 2),
        "first_row_s": None if first_row is None else round(first_row, 2),
        "total_s": round(time.perf_counter() - t0, 1),
        "mb": round(size / 1e6, 1),
        "ended": ended,
        "load": [start_load, load()],
    }


def source_root(args, scale: int) -> Path:
    """The rollout root of one scale: ``--runs DIR/x<scale>`` (shared, kept, only read once made) or the
    work folder's own ``root``."""
    return (args.runs if args.runs is not None else args.work) / f"x{scale}" / "root"


# ---- one scale -------------------------------------------------------------------------------------------


def prepare(args, scale: int) -> dict:
    """One scale made ready to measure: its runs (made if absent), its store (ingested if asked or absent),
    and the callbacks its pages send (recorded from headless Chromium on a first server, whose caches are
    then thrown away). Returns the scale's result so far, with the private ``_ctx`` the rounds use."""
    from benchmarks.load_test import capture

    work = args.work / f"x{scale}"
    work.mkdir(parents=True, exist_ok=True)
    root = source_root(args, scale)
    cache = work / "cache"
    run_dir = root / RUN
    gen = make_run(run_dir, BASE_STEPS * scale, args.per_step, args.tokens)
    make_run(root / REF, 20, args.per_step, args.tokens)
    res: dict = {"scale": scale, "generated_gb": round(gen["bytes"] / 1e9, 2)}
    if args.ingest or not list(cache.glob(f"{RUN}-*")):
        res["ingest"] = ingest(args.src, run_dir, cache)
    ingest(args.src, root / REF, cache) if not list(cache.glob(f"{REF}-*")) else None
    store = store_dir(cache, RUN)
    res["store_gb"] = round(du(store) / 1e9, 2)
    t = targets(store)
    res["responses"] = t["responses"]
    urls = page_urls(t)
    log = work / f"gunicorn-{args.label}.log"
    recorded = work / f"callbacks-{args.label}.json"
    if args.reuse_callbacks and recorded.exists():
        # The callbacks an earlier invocation of this label recorded: the browser's capture varies by one
        # callback between invocations (a page's sum then adds one more answer), replaying one set does not.
        bodies = json.loads(recorded.read_text())
        res["callbacks_reused"] = str(recorded)
    else:
        # Each page loaded twice, and the second load's callbacks kept (a slow first answer ends a capture
        # before the callbacks it would have set off).
        clear_server_caches(cache)
        with Server(args.src, root, cache, log) as srv:
            capture(srv.base, urls, settle=3.0)
            bodies = capture(srv.base, urls, settle=3.0)
        recorded.write_text(json.dumps(bodies))
    res["callbacks_recorded"] = {p: len(b) for p, b in bodies.items()}
    res["_ctx"] = {"work": work, "root": root, "cache": cache, "log": log, "bodies": bodies, "rounds": []}
    return res


def page_round(args, res: dict, last: bool) -> None:
    """One fresh server of one scale: every page cold, then warm. On the scale's ``last`` round, the
    worker's memory (at once, and after IDLE_SECONDS: Polars' allocator gives freed memory back after 5 s,
    see data/config.py) and the export too."""
    ctx = res["_ctx"]
    clear_server_caches(ctx["cache"])
    if args.drop_caches:  # the store's files read from the disk, as after other work pushed them out
        drop_page_cache()
    with Server(args.src, ctx["root"], ctx["cache"], ctx["log"]) as srv:
        res["memory_start"] = srv.worker_memory()
        cold = replay(srv.base, ctx["bodies"], srv)
        # Warm is the steady state: the median of several passes, not the one pass after the cold one (a
        # single pass of 4-12 callbacks of 20-60 ms each swung by 30 % between rounds on this machine).
        warm = median_pages([replay(srv.base, ctx["bodies"], srv) for _ in range(args.warm_passes)])
        ctx["rounds"].append({"cold": cold, "warm": warm})
        if not last:
            return
        res["memory_after_pages"] = srv.worker_memory()
        time.sleep(IDLE_SECONDS)
        res["memory_after_pages_idle"] = srv.worker_memory()
        res["export"] = export(srv.base, args.export_timeout)
        res["memory_after_export"] = srv.worker_memory()
        time.sleep(IDLE_SECONDS)
        res["memory_after_export_idle"] = srv.worker_memory()


def first_page_round(args, res: dict) -> None:
    """``--first-page``: each page alone on a fresh server (see the module), the ``first`` figures of the
    round :func:`page_round` just measured."""
    ctx, first = res["_ctx"], {}
    for page, calls in ctx["bodies"].items():
        clear_server_caches(ctx["cache"])
        if args.drop_caches:
            drop_page_cache()
        with Server(args.src, ctx["root"], ctx["cache"], ctx["log"]) as srv:
            first[page] = replay(srv.base, {page: calls}, srv)[page]
    ctx["rounds"][-1]["first"] = first


def finish(args, res: dict) -> dict:
    """A scale's result once its rounds are done: a page's figure is the median of the rounds'."""
    ctx = res.pop("_ctx")
    rounds = ctx["rounds"]
    for kind in rounds[0]:  # cold, warm (and first)
        res[kind] = median_pages([r[kind] for r in rounds])
    res["rounds"] = rounds
    if not args.keep:
        shutil.rmtree(ctx["work"], ignore_errors=True)  # never ``--runs``: a shared folder of sources stays
    return res


def measure_all(args) -> list[dict]:
    """Every scale prepared, then ``--rounds`` rounds, each with one fresh server per scale, the scales'
    order turned round every other round (small, large, large, small, …): what the machine's speed does
    meanwhile (it drifts with the other work on it) falls on every scale alike, not on the last one."""
    results = [prepare(args, scale) for scale in args.scales]
    for i in range(args.rounds):
        for res in results if i % 2 == 0 else results[::-1]:
            page_round(args, res, last=i == args.rounds - 1)
            if args.first_page:
                first_page_round(args, res)
    return [finish(args, res) for res in results]


# ---- the table -------------------------------------------------------------------------------------------


def figures(r: dict) -> dict[str, float | None]:
    """The figures of one scale that the table and the slopes show."""
    f = {
        "ingest s": r.get("ingest", {}).get("seconds"),
        "ingest peak RSS MB": r.get("ingest", {}).get("peak_rss_mb"),
        "store GB": r["store_gb"],
        "worker RSS after pages MB": max(r["memory_after_pages"]["rss_mb"]),
        "worker RSS 6 s later MB": max(r.get("memory_after_pages_idle", {}).get("rss_mb", [0])) or None,
        "worker RSS after export MB": max(r["memory_after_export"]["rss_mb"]),
        "export first byte s": r["export"]["first_byte_s"],
        "export first row s": r["export"].get("first_row_s"),
        "export total s": r["export"]["total_s"],
    }
    for page in r["cold"]:
        f[f"{page} cold ms"] = r["cold"][page]["ms"]
        f[f"{page} warm ms"] = r["warm"][page]["ms"]
        if page in r.get("first", {}):
            f[f"{page} first ms"] = r["first"][page]["ms"]
        if r["cold"][page].get("background_s"):  # work left running after the answers (a search's count)
            f[f"{page} cold, background s"] = r["cold"][page]["background_s"]
    return f


def slope(n0: int, v0, n1: int, v1) -> float | None:
    if v0 in (None, 0) or v1 is None or n1 == n0:
        return None
    return round(math.log(max(v1, 1e-9) / v0) / math.log(n1 / n0), 2)


def table(results: list[dict], label: str) -> str:
    rows = [figures(r) for r in results]
    heads = [f"{r['responses']:,} (load {r['cold']['runs']['load']})" for r in results]
    lines = [f"| {label} | " + " | ".join(heads) + " | slope | ratio |", "|---" * (len(heads) + 3) + "|"]
    for key in rows[0]:
        vals = [row.get(key) for row in rows]
        k = slope(results[0]["responses"], vals[0], results[-1]["responses"], vals[-1])
        ratio = None if vals[0] in (None, 0) or vals[-1] is None else round(vals[-1] / vals[0], 2)
        cells = ["–" if v is None else f"{v:,}" for v in vals]
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {k} | {ratio} |")
    return "\n".join(lines)


def compiled_dependencies() -> bool:
    """Whether the interpreter's packages hold their bytecode (``uv sync --compile-bytecode``, or pip's
    default, as in the Docker image): plotly's and numpy.ma's modules, which pages import on first use."""
    import importlib.util

    for name in ("plotly.graph_objs._figure", "numpy.ma.core"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            return False
        if not Path(importlib.util.cache_from_source(spec.origin)).exists():
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the runs, stores and logs")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 10])
    ap.add_argument("--src", type=Path, default=REPO, help="source tree of the app to measure")
    ap.add_argument("--label", default="after")
    ap.add_argument("--per-step", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument(
        "--runs", type=Path, default=None,
        help="folder of the source runs (DIR/x<scale>/root/{run,ref}), made there if absent and then only "
        "read: one copy shared by several benchmarks; by default they are made in --work",
    )  # fmt: skip
    ap.add_argument("--generate-only", action="store_true", help="make the source runs, measure nothing")
    ap.add_argument("--no-ingest", dest="ingest", action="store_false")
    ap.add_argument(
        "--reuse-callbacks", action="store_true",
        help="replay the callbacks an earlier invocation of this --label recorded in --work (when there): "
        "every invocation of a side then sums the same callbacks",
    )  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the generated runs and stores")
    ap.add_argument("--export-timeout", type=float, default=900.0)
    ap.add_argument("--rounds", type=int, default=3, help="fresh servers, each replaying cold then warm")
    ap.add_argument(
        "--drop-caches", action="store_true",
        help="empty the kernel's page cache before each fresh server (root): cold pages read the store from disk",
    )  # fmt: skip
    ap.add_argument(
        "--first-page", action="store_true",
        help="in each round, each page also alone on a fresh server (its 'first' figure): see first_page_round",
    )  # fmt: skip
    ap.add_argument(
        "--warm-passes", type=int, default=5,
        help="warm passes per round after the cold one; a round's warm figure is their median",
    )  # fmt: skip
    args = ap.parse_args(argv)
    # The children run in --src (their working directory): every path they are given is absolute.
    args.src, args.work = args.src.resolve(), args.work.resolve()
    args.runs = args.runs.resolve() if args.runs is not None else None
    args.work.mkdir(parents=True, exist_ok=True)
    if args.generate_only:
        for scale in args.scales:
            root = source_root(args, scale)
            gen = make_run(root / RUN, BASE_STEPS * scale, args.per_step, args.tokens)
            make_run(root / REF, 20, args.per_step, args.tokens)
            print(json.dumps({"scale": scale, "root": str(root), **gen}), flush=True)
        return 0
    if not compiled_dependencies():
        print(
            "bench_scale: the dependencies have no bytecode (PYTHONDONTWRITEBYTECODE?): a cold page then also "
            "compiles what it imports first, which a deployed image does not; run uv sync --compile-bytecode",
            file=sys.stderr,
        )
    results = measure_all(args)
    out_bytecode = compiled_dependencies()
    for res in results:
        print(json.dumps(res), file=sys.stderr, flush=True)
    out = {
        "label": args.label,
        "src": str(args.src),
        "cpus": os.cpu_count(),
        "compiled_dependencies": out_bytecode,
        "results": results,
    }
    print(json.dumps(out))
    print(table(results, args.label), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
