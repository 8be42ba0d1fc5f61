"""Load test (slow; not part of the test run): many users on a big run while a trainer appends steps.

    uv run python benchmarks/load_test.py [--source-run /tmp/bench/big] [--source-cache /tmp/bench/cache]
        [--work /tmp/rlboard-load] [--clients 20] [--duration 60] [--workers 2] [--threads 4]
        [--append-every 6] [--max-requests 200000] [--abusive 1] [--exports 3] [--src DIR]

1. Makes a private copy of the benchmark run (files, and its store so that nothing is re-ingested) under
   ``--work``: the writer appends to the copy, never to the shared run.
2. Starts gunicorn (``gunicorn.conf.py``, ``--workers`` processes) on 127.0.0.1.
3. Records the callbacks the Dash renderer POSTs when the reward, responses and token pages load (headless
   Chromium's network log), so the replay is what a browser sends.
4. ``--clients`` threads replay them (client ``i`` replays page ``i mod 3``) for ``--duration`` seconds,
   while a writer thread appends one whole step (``benchmarks/generate.append_step``, the run's own
   parameters) every ``--append-every`` seconds. Reward-page clients follow the run like a browser: the
   URL callback picks the run's last step and the step callback's "responses" count must be the full
   per-step count (never a step committed half-way).
   With ``--abusive N``, N more clients attack beside them, round after round: pathological regular
   expressions (a search that would take minutes, one too large once compiled) through /export and the
   responses page's callback, a 4 KB query string of junk keys and a 1 MB one in a callback, repeated keys,
   and a 50 MB body. Their answers must be 4xx or 200, never a 5xx or a dropped connection.
   With ``--exports N``, N more clients each run full exports of the run (``/export?step=all``, CSV) one
   after the other, reading every byte: each must answer 200 and never drop its connection.
5. Prints one JSON object: requests, errors (must be 0), partial steps seen (must be 0), latency p50/p95/p99
   overall and per page, steps appended and steps the clients saw, the exports (errors, how long those
   that ended took, their first byte) and the CPU seconds each worker used.

Traffic goes to 127.0.0.1 only, bounded by ``--duration`` and ``--max-requests``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.generate import append_step  # noqa: E402
from data.config import DEFAULT_PAD_TOKENS  # noqa: E402
from data.ingest import ingest_run  # noqa: E402
from data.store import run_files, store_dir_for  # noqa: E402
from data.store.manifest import manifest_bytes, read_manifest, write_atomic  # noqa: E402

PAGES = ("reward", "responses", "tokens")
RUN = "big"
CALLBACK_PATH = "/_dash-update-component"
# The reward page's own dcc.Location's search (components.layout.page_url), as Dash writes its id.
REWARD_URL = '{"path":"/reward","type":"app-page-url"}.search'


# ---- 1. a private copy of the run ------------------------------------------------------------------------


def prepare(source_run: Path, source_cache: Path, work: Path) -> tuple[Path, Path, dict]:
    """Copy the run's files (kept across invocations: the copy keeps growing) and its store; returns
    ``(root, cache, info)``. The copied store's manifest is pointed at the copies (same bytes, new inodes),
    so only what the copy has beyond the store is ingested."""
    root, cache = work / "rollouts", work / "cache"
    run_dir = root / RUN
    info: dict = {}
    t0 = time.perf_counter()
    if not run_dir.is_dir() or not run_files(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        for f in run_files(source_run):
            shutil.copy2(f, run_dir / f.name)
        info["copied_bytes"] = sum(f.stat().st_size for f in run_files(run_dir))
    dst = store_dir_for(cache, run_dir, DEFAULT_PAD_TOKENS)
    src = store_dir_for(source_cache, source_run, DEFAULT_PAD_TOKENS)
    if read_manifest(dst) is None and read_manifest(src) is not None:
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock", ".*.tmp"))
        m = read_manifest(dst)
        for rel, entry in m.data["files"].items():
            st = (run_dir / rel).stat()
            entry.update(dev=st.st_dev, ino=st.st_ino)
        m.data["run_path"] = str(run_dir.resolve())
        write_atomic(dst / "manifest.json", manifest_bytes(m.data))
        info["copied_store"] = True
    info["prepare_seconds"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    res = ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS)
    info.update(
        ingest_seconds=round(time.perf_counter() - t0, 1),
        ingested_bytes=res.bytes_read,
        samples=res.samples,
        steps=res.steps,
        run_bytes=sum(f.stat().st_size for f in run_files(run_dir)),
    )
    return root, cache, info


def last_step(cache: Path, run_dir: Path) -> tuple[int, str]:
    """The run's last step and the sample id of that step's first response (for the token page)."""
    import polars as pl

    from data.store import open_store

    store = open_store(store_dir_for(cache, run_dir, DEFAULT_PAD_TOKENS))
    step = int(store.steps().select(pl.col("step").max()).item())
    sample = (
        store.scalars().filter(pl.col("step") == step).sort("source", "line").get_column("sample_id").item(0)
    )
    return step, sample


# ---- 2. gunicorn -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(
    root: Path,
    cache: Path,
    workers: int,
    threads: int,
    log: Path,
    src: Path = ROOT,
    env_extra: dict | None = None,
) -> tuple[subprocess.Popen, str]:
    """gunicorn as deployed (``src``'s ``gunicorn.conf.py``, serving the app of source tree ``src``), with
    ``env_extra`` settings on top (e.g. ``RLBOARD_REFRESH_SECONDS``)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLBOARD_")}
    env.update(
        RLBOARD_ROOT=str(root),
        RLBOARD_CACHE_DIR=str(cache),
        RLBOARD_HOST="127.0.0.1",
        RLBOARD_PORT=str(port),
        RLBOARD_DEMO="0",
        RLBOARD_WORKERS=str(workers),
        RLBOARD_THREADS=str(threads),
        RLBOARD_LOG_LEVEL="warning",
    )
    env.update(env_extra or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", str(src / "gunicorn.conf.py"), "app:server"],
            cwd=src,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn exited ({proc.returncode}); see {log}")
        try:
            if requests.get(base + "/healthz", timeout=2).status_code == 200:
                return proc, base
        except requests.RequestException:
            pass
        time.sleep(0.3)
    stop_gunicorn(proc)
    raise SystemExit(f"gunicorn not healthy in 120 s; see {log}")


def stop_gunicorn(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


# ---- 3. what the browser sends ---------------------------------------------------------------------------


def capture(base: str, urls: dict[str, str], settle: float = 3.0) -> dict[str, list[dict]]:
    """``{page: [callback body, ...]}``: the POSTs headless Chromium sends while each page loads."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options

    opts = Options()
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--window-size=1400,1000",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=opts)
    out: dict[str, list[dict]] = {}
    try:
        for page, url in urls.items():
            driver.get_log("performance")
            driver.get(base + url)
            deadline = time.monotonic() + 90
            quiet_since = time.monotonic()
            seen = 0
            bodies: list[dict] = []
            while time.monotonic() < deadline:
                for entry in driver.get_log("performance"):
                    msg = json.loads(entry["message"])["message"]
                    if msg.get("method") != "Network.requestWillBeSent":
                        continue
                    req = msg["params"]["request"]
                    if req.get("method") == "POST" and CALLBACK_PATH in req["url"]:
                        data = req.get("postData")
                        if data is None:
                            got = driver.execute_cdp_cmd(
                                "Network.getRequestPostData", {"requestId": msg["params"]["requestId"]}
                            )
                            data = got.get("postData")
                        bodies.append(json.loads(data))
                if len(bodies) != seen:
                    seen, quiet_since = len(bodies), time.monotonic()
                elif bodies and time.monotonic() - quiet_since > settle:
                    break
                time.sleep(0.2)
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            if errors:
                print(f"warning: console errors on {url}: {errors[:2]}", file=sys.stderr)
            # The shell's live poll is a timer, not the page: keep the page's own callbacks.
            out[page] = [b for b in bodies if "app-live" not in b["output"]]
    finally:
        driver.quit()
    return out


# ---- 4. replay -------------------------------------------------------------------------------------------


def _with_inputs(body: dict, values: dict[str, object], drop_state: tuple[str, ...] = ()) -> dict:
    """A copy of a callback body with the given ``"id.prop"`` input/state values replaced."""
    new = json.loads(json.dumps(body))
    for group in ("inputs", "state"):
        for item in new.get(group, []):
            if not isinstance(item, dict):
                continue
            cid = item.get("id")  # a dict id (a page's own Location) as Dash writes it: JSON, sorted keys
            cid = json.dumps(cid, sort_keys=True, separators=(",", ":")) if isinstance(cid, dict) else cid
            key = f"{cid}.{item.get('property')}"
            if key in values:
                item["value"] = values[key]
            elif key in drop_state:
                item["value"] = None
    return new


def _responses_count(children) -> int | None:
    """The number after the "responses" label in the reward page's step stats."""
    stack = [children]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            kids = node.get("props", {}).get("children")
            if isinstance(kids, list) and len(kids) == 2:
                texts = [k.get("props", {}).get("children") if isinstance(k, dict) else k for k in kids]
                if texts[0] == "responses" and isinstance(texts[1], str):
                    return int(texts[1].replace(",", ""))
            if kids is not None:
                stack.append(kids)
    return None


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {p: [] for p in PAGES}
        self.errors: list[str] = []
        self.partial: list[str] = []
        self.steps_seen: set[int] = set()
        self.requests = 0

    def add(self, page: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.requests += 1
            self.latency[page].append(seconds)
            if error:
                self.errors.append(f"{page}: {error}")


def client(
    i: int, base: str, bodies: dict, stats: Stats, stop: threading.Event, per_step: int, cap: int
) -> None:
    import requests

    page = PAGES[i % len(PAGES)]
    session = requests.Session()
    url = base + CALLBACK_PATH

    def post(body: dict):
        t0 = time.perf_counter()
        try:
            r = session.post(url, json=body, timeout=60)
        except requests.RequestException as e:
            stats.add(page, time.perf_counter() - t0, f"{type(e).__name__}")
            return None
        dt = time.perf_counter() - t0
        if r.status_code not in (200, 204):
            stats.add(page, dt, f"HTTP {r.status_code} on {body['output'][:60]}: {r.text[:120]}")
            return None
        stats.add(page, dt)
        return r.json()["response"] if r.status_code == 200 else {}

    sync = next((b for b in bodies[page] if "reward-selected.data" in b["output"]), None)
    step_view = next((b for b in bodies[page] if "reward-step-stats.children" in b["output"]), None)
    while not stop.is_set() and stats.requests < cap:
        if page == "reward" and sync is not None and step_view is not None:
            # Follow the run like a browser opening /reward?run=big: the last step, then its stats.
            resp = post(
                _with_inputs(sync, {REWARD_URL: f"?run={RUN}"}, ("reward-selected.data", "reward-run.data"))
            )
            step = (resp or {}).get("reward-selected", {}).get("data")
            if isinstance(step, int):
                resp = post(_with_inputs(step_view, {"reward-run.data": RUN, "reward-selected.data": step}))
                n = _responses_count((resp or {}).get("reward-step-stats", {}).get("children"))
                with stats.lock:
                    stats.steps_seen.add(step)
                    if n is not None and n != per_step:
                        stats.partial.append(f"step {step}: {n} responses")
            others = [b for b in bodies[page] if b is not sync and b is not step_view]
        else:
            others = bodies[page]
            if not others:
                return  # nothing recorded for this page: reported as callbacks_recorded 0
        for body in others:
            if stop.is_set():
                break
            post(body)


# What the abusive client sends: a search that takes minutes on ordinary text with Rust's regex (559 s on
# one 2.6 MB part of the benchmark run: under the compiled-size limit, so only the deadline stops it), one
# refused for its compiled size, and the classic catastrophic-backtracking pattern.
SLOW_REGEXES = (r"(?s)(.{0,100}){10}zq", r"((a{50}){50}){50}", r"(a+)+$")


def abusive_client(base: str, bodies: dict, stats: dict, stop: threading.Event) -> None:
    import requests

    session = requests.Session()
    url = base + CALLBACK_PATH
    render = next((b for b in bodies["responses"] if "responses-summary.children" in b["output"]), None)
    sync = next((b for b in bodies["reward"] if "reward-selected.data" in b["output"]), None)

    def hit(kind: str, method: str, path: str, **kw) -> None:
        t0 = time.perf_counter()
        try:
            r = session.request(method, base + path if path.startswith("/") else path, timeout=120, **kw)
            code = r.status_code
        except requests.RequestException as e:
            code = type(e).__name__
        with stats["lock"]:
            stats["requests"] += 1
            stats["latency"].append(time.perf_counter() - t0)
            stats["answers"].setdefault(kind, {}).setdefault(str(code), 0)
            stats["answers"][kind][str(code)] += 1
            if not isinstance(code, int) or code >= 500:
                stats["server_errors"].append(f"{kind}: {code}")

    junk = "&".join(f"k{i}=v" for i in range(500))[:4000]
    while not stop.is_set():
        for q in SLOW_REGEXES:
            hit("regex-export", "GET", "/export", params={"run": RUN, "step": "all", "q": q})
            if render is not None:
                body = _with_inputs(render, {"responses-view.data": f"?run={RUN}&step=all&q={q}"})
                hit("regex-callback", "POST", url, json=body)
        hit("huge-query", "GET", f"/reward?run={RUN}&{junk}")
        if sync is not None:
            search = f"?run={RUN}&" + "&".join(f"k{i}=" + "x" * 40 for i in range(20000))  # ~1 MB
            hit("huge-query-callback", "POST", url, json=_with_inputs(sync, {REWARD_URL: search}))
        hit("repeated-keys", "GET", f"/export?run={RUN}&run={RUN}&step=1&step=2")
        if render is not None:
            body = _with_inputs(
                render, {"responses-view.data": f"?run={RUN}&run=x&step=1&step=2&sort=kl&sort=x"}
            )
            hit("repeated-keys-callback", "POST", url, json=body)
        t0 = time.perf_counter()
        code = _post_big(base, 50 << 20)
        with stats["lock"]:
            stats["requests"] += 1
            stats["latency"].append(time.perf_counter() - t0)
            stats["answers"].setdefault("big-body", {}).setdefault(str(code), 0)
            stats["answers"]["big-body"][str(code)] += 1
            if code is None or code >= 500:
                stats["server_errors"].append(f"big-body: {code}")


def _post_big(base: str, size: int) -> int | None:
    """POST ``size`` bytes to the callback route, sending until the server stops reading; its status."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.putrequest("POST", u.path.rstrip("/") + CALLBACK_PATH)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        chunk, sent = b"x" * (1 << 20), 0
        try:
            while sent < size:
                conn.send(chunk)
                sent += len(chunk)
        except OSError:
            pass  # answered (413) and closed without reading the rest
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def exporter(base: str, stats: dict, stop: threading.Event) -> None:
    """Full exports of the run (every step, CSV) one after the other, each read to its end (or until the
    test stops): each answer must be a 200 whose body arrives without a dropped connection."""
    import requests

    session = requests.Session()
    params = {"run": RUN, "step": "all", "format": "csv"}
    while not stop.is_set():
        t0 = time.perf_counter()
        size, first = 0, None
        try:
            with session.get(base + "/export", params=params, stream=True, timeout=120) as r:
                if r.status_code != 200:
                    with stats["lock"]:
                        stats["errors"].append(f"HTTP {r.status_code}: {r.text[:120]}")
                    continue
                for chunk in r.iter_content(1 << 16):
                    if first is None:
                        first = time.perf_counter() - t0
                    size += len(chunk)
                    if stop.is_set():
                        break
                else:
                    with stats["lock"]:
                        stats["completed"].append(round(time.perf_counter() - t0, 1))
        except requests.RequestException as e:
            if not stop.is_set():
                with stats["lock"]:
                    stats["errors"].append(type(e).__name__)
        with stats["lock"]:
            stats["bytes"] += size
            if first is not None:
                stats["first_byte_s"].append(round(first, 2))


def worker_cpu(proc: subprocess.Popen) -> dict[int, float]:
    """CPU seconds (user + system) each gunicorn worker has used so far, by pid."""
    import psutil

    out = {}
    for w in psutil.Process(proc.pid).children():
        try:
            t = w.cpu_times()
            out[w.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def writer(run_dir: Path, first: int, every: float, stop: threading.Event, log: list, gen: dict) -> None:
    step = first
    while not stop.wait(every):
        t0 = time.perf_counter()
        rep = append_step(run_dir, step, **gen)
        log.append({"step": step, "bytes": rep["bytes"], "seconds": round(time.perf_counter() - t0, 3)})
        step += 1


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))] * 1000, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source-run", type=Path, default=Path("/tmp/bench/big"))
    ap.add_argument("--source-cache", type=Path, default=Path("/tmp/bench/cache"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/rlboard-load"))
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument(
        "--append-every", type=float, default=6.0, help="seconds between appended steps (0: none)"
    )
    ap.add_argument("--max-requests", type=int, default=200_000)
    ap.add_argument("--per-step", type=int, default=512, help="the run's generate.py parameters")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--abusive", type=int, default=0, help="abusive clients beside the normal ones")
    ap.add_argument("--src", type=Path, default=ROOT, help="source tree of the app to serve (a before)")
    ap.add_argument("--exports", type=int, default=0, help="clients running full exports beside them")
    args = ap.parse_args(argv)
    if not args.source_run.is_dir() or not run_files(args.source_run):
        raise SystemExit(f"no run at {args.source_run} (make one: python benchmarks/generate.py DIR)")

    root, cache, info = prepare(args.source_run, args.source_cache, args.work)
    run_dir = root / RUN
    step, sample = last_step(cache, run_dir)
    log = args.work / "gunicorn.log"
    proc, base = start_gunicorn(root, cache, args.workers, args.threads, log, args.src.resolve())
    try:
        urls = {
            "reward": f"/reward?run={RUN}",
            "responses": f"/responses?run={RUN}&step={step}&sort=kl&order=desc",
            "tokens": f"/tokens?run={RUN}&sample={sample}",
        }
        bodies = capture(base, urls)
        (args.work / "callbacks.json").write_text(json.dumps(bodies, indent=1))
        load_before = os.getloadavg()[0]
        stats = Stats()
        stop = threading.Event()
        appended: list[dict] = []
        gen = dict(per_step=args.per_step, tokens=args.tokens, ranks=args.ranks, seed=args.seed)
        threads = [
            threading.Thread(
                target=client, args=(i, base, bodies, stats, stop, args.per_step, args.max_requests)
            )
            for i in range(args.clients)
        ]
        abuse = {"lock": threading.Lock(), "requests": 0, "latency": [], "answers": {}, "server_errors": []}
        threads += [
            threading.Thread(target=abusive_client, args=(base, bodies, abuse, stop))
            for _ in range(args.abusive)
        ]
        exports = {"lock": threading.Lock(), "errors": [], "completed": [], "bytes": 0, "first_byte_s": []}
        threads += [
            threading.Thread(target=exporter, args=(base, exports, stop)) for _ in range(args.exports)
        ]
        if args.append_every > 0:
            threads.append(
                threading.Thread(
                    target=writer, args=(run_dir, step + 1, args.append_every, stop, appended, gen)
                )
            )
        cpu0 = worker_cpu(proc)
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        stop.wait(args.duration)
        cpu1 = worker_cpu(proc)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        wall = time.perf_counter() - t0
    finally:
        stop_gunicorn(proc)
    every = [x for v in stats.latency.values() for x in v]
    result = {
        "clients": args.clients,
        "workers": args.workers,
        "threads": args.threads,
        "duration_s": round(wall, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "load_1min_before": round(load_before, 1),
            "load_1min_after": round(os.getloadavg()[0], 1),
        },
        "run": {**info, "last_step_at_start": step},
        "callbacks_recorded": {p: len(b) for p, b in bodies.items()},
        "requests": stats.requests,
        "requests_per_s": round(stats.requests / wall, 1),
        "errors": len(stats.errors),
        "error_examples": stats.errors[:5],
        "partial_steps_seen": len(stats.partial),
        "partial_examples": stats.partial[:5],
        "abusive": {
            "clients": args.abusive,
            "requests": abuse["requests"],
            "answers": abuse["answers"],
            "server_errors": len(abuse["server_errors"]),
            "server_error_examples": abuse["server_errors"][:5],
            "latency_ms": {"p50": pct(abuse["latency"], 0.5), "max": pct(abuse["latency"], 1.0)},
        },
        "exports": {
            "clients": args.exports,
            "errors": len(exports["errors"]),
            "error_examples": exports["errors"][:5],
            "completed_s": exports["completed"],
            "first_byte_s": exports["first_byte_s"],
            "mb_sent": round(exports["bytes"] / 1e6, 1),
        },
        # CPU seconds each worker used during the test: how the load is shared between them.
        "worker_cpu_s": sorted(round(cpu1[p] - cpu0.get(p, 0.0), 1) for p in cpu1),
        "steps_appended": [a["step"] for a in appended],
        "steps_seen_by_clients": sorted(stats.steps_seen),
        "latency_ms": {
            "p50": pct(every, 0.50),
            "p95": pct(every, 0.95),
            "p99": pct(every, 0.99),
            "max": pct(every, 1.0),
            **{p: {"n": len(v), "p50": pct(v, 0.5), "p95": pct(v, 0.95)} for p, v in stats.latency.items()},
        },
    }
    print(json.dumps(result))
    ok = not stats.errors and not stats.partial and not abuse["server_errors"] and not exports["errors"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
