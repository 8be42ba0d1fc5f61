"""Queries with a bounded cost: a query built from a user's input (a regex search) runs in a helper process
at a low CPU priority and is killed at its deadline, so that one costly search never holds a worker thread
or the CPU that other users' pages need. (Polars cannot stop a query once its kernels run.)

Run as a script (``python -P bounded.py``), this module is that helper: it reads serialized LazyFrames on
stdin and answers each with its result as Arrow IPC, or with Polars' error message. It imports nothing but
Polars and the standard library.
"""

from __future__ import annotations

import io
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time

import polars as pl

# Helpers per server process: at most this many searches of one worker run at once (the others wait, within
# their own deadline). Each helper is a Python process with Polars imported (~60 MB resident when idle).
HELPERS = 2
# The helper's nice value: under load, pages (nice 0) get ~10x its CPU share (Linux weights 1024 vs 110),
# so a costly search slows itself down, not the other users; on an idle server it runs at full speed.
HELPER_NICE = 10
# The helper exits by itself this long after a deadline its parent missed (a parent that died, hung).
HELPER_GRACE_SECONDS = 5.0

_REQUEST = struct.Struct("<dQ")  # seconds allowed, length of the serialized LazyFrame
_ANSWER = struct.Struct("<cQ")  # b"o" (Arrow IPC follows) or b"e" (error text follows), length


class Stopped(Exception):
    """The query did not finish before its deadline (its helper was killed)."""


class Failed(Exception):
    """Polars raised while running the query in the helper; the message is Polars' own."""


class _Helper:
    """One helper process, used by one thread at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, payload: bytes, deadline: float) -> bytes:
        seconds = max(deadline - time.monotonic(), 0.0)
        self.proc.stdin.write(_REQUEST.pack(seconds, len(payload)) + payload)
        self.proc.stdin.flush()
        kind, n = _ANSWER.unpack(self._read(_ANSWER.size, deadline))
        body = self._read(n, deadline + 30.0)  # the answer is written; reading it only waits on the pipe
        if kind == b"e":
            raise Failed(body.decode("utf-8", "replace"))
        return body

    def _read(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        out = bytearray()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise Stopped
            chunk = os.read(fd, min(n - len(out), 1 << 20))
            if not chunk:
                raise Failed("the search helper exited")
            out += chunk
        return bytes(out)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class _Pool:
    """Up to :data:`HELPERS` helpers of this process, started on first use and kept while they behave."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._cond = threading.Condition()
        self._idle: list[_Helper] = []
        self._count = 0
        self._pid = os.getpid()

    def _forked(self) -> None:
        # A forked child must not use its parent's helpers (their pipes are the parent's).
        if self._pid != os.getpid():
            self._pid, self._idle, self._count = os.getpid(), [], 0

    def acquire(self, deadline: float) -> _Helper:
        with self._cond:
            self._forked()
            while True:
                while self._idle:
                    helper = self._idle.pop()
                    if helper.alive():
                        return helper
                    self._count -= 1
                if self._count < self.size:
                    self._count += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Stopped
                self._cond.wait(left)
        try:
            return _Helper()
        except BaseException:
            self._discard()
            raise

    def release(self, helper: _Helper, reuse: bool) -> None:
        if reuse and helper.alive():
            with self._cond:
                self._idle.append(helper)
                self._cond.notify()
            return
        helper.kill()
        self._discard()

    def _discard(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def warm(self) -> None:
        """Start one helper now (when none is up), so that a first search does not wait for Python and
        Polars to start."""
        with self._cond:
            self._forked()
            if self._count:
                return
            self._count += 1
        try:
            helper = _Helper()
        except BaseException:
            self._discard()
            raise
        with self._cond:
            self._idle.append(helper)
            self._cond.notify()


_POOL = _Pool(HELPERS)


def collect(lf: pl.LazyFrame, seconds: float) -> pl.DataFrame:
    """``lf.collect()`` in a helper process, given at most ``seconds`` (waiting for a free helper included).

    Raises :class:`Stopped` when the deadline passes (the helper is killed, so the query's CPU is freed at
    once) and :class:`Failed` with Polars' message when the query raises.
    """
    deadline = time.monotonic() + seconds
    payload = lf.serialize()
    helper = _POOL.acquire(deadline)
    reuse = False
    try:
        body = helper.run(payload, deadline)
        reuse = True
    except Failed:
        reuse = helper.alive()
        raise
    finally:
        _POOL.release(helper, reuse)
    return pl.read_ipc(io.BytesIO(body))


def warm() -> None:
    """Start this process's first helper in the background (see :meth:`_Pool.warm`)."""
    threading.Thread(target=_warm_or_log, name="search-helper-warm", daemon=True).start()


def _warm_or_log() -> None:
    # A helper that cannot start (an interpreter this uid may not run) is no crash of a background
    # thread: one log line here; a search then fails with the same error, which the page reports.
    try:
        _POOL.warm()
    except OSError as e:
        logging.getLogger("rlboard.search").warning("cannot start a search helper: %s", e)


# ---- the helper process ----------------------------------------------------------------------------------


def _serve() -> None:
    import signal

    # Ctrl-C in a terminal reaches the whole process group: the server shuts its helpers down itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(HELPER_NICE)
    except OSError:
        pass
    # Answers go to a private copy of stdout; anything a library prints goes to stderr (the server's log).
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    parent = os.getppid()
    state = {"deadline": None}

    def watchdog() -> None:
        while True:
            time.sleep(0.5)
            late = state["deadline"] is not None and time.monotonic() > state["deadline"]
            if late or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    while True:
        head = requests.read(_REQUEST.size)
        if len(head) < _REQUEST.size:
            return
        seconds, n = _REQUEST.unpack(head)
        payload = requests.read(n)
        state["deadline"] = time.monotonic() + seconds + HELPER_GRACE_SECONDS
        try:
            df = pl.LazyFrame.deserialize(io.BytesIO(payload)).collect()
            buf = io.BytesIO()
            df.write_ipc(buf)
            kind, body = b"o", buf.getvalue()
        except Exception as e:  # noqa: BLE001 - any Polars error is the answer
            kind, body = b"e", str(e).encode("utf-8", "replace")
        state["deadline"] = None
        try:
            answers.write(_ANSWER.pack(kind, len(body)) + body)
            answers.flush()
        except OSError:  # the server stopped reading (it exited mid-search): no traceback in its log
            os._exit(0)


if __name__ == "__main__":
    _serve()
