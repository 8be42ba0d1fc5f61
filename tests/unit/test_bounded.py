"""The search helper of ``data.bounded`` run as the server runs it."""

from __future__ import annotations

import subprocess
import sys

import polars as pl

from data import bounded


def test_bounded001_a_helper_whose_server_is_gone_exits_quietly():
    """A helper whose server stopped reading its answers (the server exited during a search) exits with no
    traceback in the server's log (it printed ``BrokenPipeError`` there)."""
    payload = pl.LazyFrame({"a": [1, 2, 3]}).select(pl.col("a").sum()).serialize()
    proc = subprocess.Popen(
        [sys.executable, "-P", bounded.__file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # nobody reads the answer
    proc.stdin.write(bounded._REQUEST.pack(30.0, len(payload)) + payload)
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-500:]
