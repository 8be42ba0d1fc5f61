"""gunicorn settings: ``gunicorn -c gunicorn.conf.py app:server`` (the Docker image's command).

Address from ``RLBOARD_HOST``/``RLBOARD_PORT`` (through ``data.config``, like ``app.py serve``); the
server's own knobs are read here because they configure gunicorn, not the app: ``RLBOARD_WORKERS``
(processes, default 2), ``RLBOARD_THREADS`` (threads per process, default 4), ``RLBOARD_EXPORT_THREADS``
(threads per process beyond those, for exports, default 3) and ``RLBOARD_TIMEOUT``
(seconds a request may take before its worker is restarted, default 120).
"""

import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from access_log import RedactingLogger  # noqa: E402
from data.config import SettingsError, load_settings  # noqa: E402

try:
    _settings = load_settings()
except SettingsError as e:
    raise SystemExit(f"error: {e}") from None


def _int_env(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"error: {name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise SystemExit(f"error: {name} must be at least {minimum}")
    return value


bind = f"{_settings.host}:{_settings.port}"
# Threads, not more processes: each process keeps its own caches (manifests, the index of a store's files,
# small results), and requests mostly wait on Parquet reads and Polars, which release the GIL.
worker_class = "gthread"
workers = _int_env("RLBOARD_WORKERS", 2)
# An export streams for as long as it takes and holds a thread all along (data.export: exports take turns, at
# a lower priority than pages), so a worker has RLBOARD_EXPORT_THREADS (default 3) more threads than
# RLBOARD_THREADS: three exports on one worker left its pages one thread of four, and took the pages' p95
# from 0.8 to 3.2 s under load (issue 33 row 15, benchmarks/RESULTS.md).
threads = _int_env("RLBOARD_THREADS", 4) + _int_env("RLBOARD_EXPORT_THREADS", 3, minimum=0)
timeout = _int_env("RLBOARD_TIMEOUT", 120)
graceful_timeout = 30
keepalive = 5
# Each worker builds the app after the fork, so background ingest threads are never forked half-way.
preload_app = False
# Heartbeat files in memory: a slow or read-only /tmp must not get workers killed.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
accesslog = "-"
# The access token of a first visit (?token=…) is written as token=[redacted] (docker logs are widely read).
logger_class = RedactingLogger
errorlog = "-"
loglevel = os.environ.get("RLBOARD_LOG_LEVEL", "info")
proc_name = "rlboard"
# gunicorn >= 25 opens a control socket at one fixed path per user ($HOME/.gunicorn/gunicorn.ctl): two
# servers of one user would fight over it, and the image's user has no writable home. Not needed here.
control_socket_disable = True


def post_worker_init(worker) -> None:
    """Once a worker has built the app: its objects so far (modules, Dash's layout and callbacks, Plotly's
    validators: ~110,000) moved out of the garbage collector's sight (``gc.freeze``). A request that makes
    many objects (a manifest or facts file parsed, a curve's points) sets off full collections, which
    otherwise walk all of them each time: 10-30 ms a time, more often the larger the run."""
    gc.collect()
    gc.freeze()
