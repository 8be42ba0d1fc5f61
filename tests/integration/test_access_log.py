"""The access token never reaches a log: gunicorn's access log (docker logs) and the development server's
request log write ``token=[redacted]`` for every spelling of the parameter a client may send."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys

import requests

from access_log import redact
from tests.conftest import REPO_ROOT, free_port
from tests.integration.test_gunicorn import GunicornServer
from tests.waiting import wait_until

SECRET = "s3cret-t0ken-9f8e7d"
# The token as a first visit carries it (the server then sets a cookie and drops it from the address), with
# other parameters around it, its name percent-encoded (still accepted), wrong, or in a Referer.
VISITS = (
    ("/", {"token": SECRET}),
    ("/reward", {"run": "trl-ppo-small", "token": SECRET, "step": "3"}),
    ("/export", {"token": SECRET + "-wrong", "run": "trl-ppo-small"}),
)
RAW = ("/?%74oken=" + SECRET, "/?%74%6F%6b%65%6e=" + SECRET + "&x=1", "/healthz?token=" + SECRET)


def _visit(base: str) -> None:
    s = requests.Session()
    for path, params in VISITS:
        s.get(base + path, params=params, allow_redirects=False, timeout=30)
    host, _, prefix = base.removeprefix("http://").partition("/")
    for raw in RAW:  # as typed: requests would decode %74 back to "t"
        conn = http.client.HTTPConnection(host, timeout=30)
        conn.request("GET", ("/" + prefix).rstrip("/") + raw)
        conn.getresponse().read()
        conn.close()
    requests.get(base + "/healthz", headers={"Referer": f"{base}/reward?token={SECRET}"}, timeout=30)


def test_log001_gunicorn_access_log_redacts_the_token(contract_root, tmp_path):
    """Real gunicorn with RLBOARD_TOKEN set: every request above is in the access log, none with the token."""
    with GunicornServer(contract_root, tmp_path / "cache", RLBOARD_TOKEN=SECRET) as srv:
        _visit(srv.base)
        # The access log is written after the response: wait for the last request's line (its Referer, the
        # token in it redacted or not), besides the count (the start-up's /healthz lines count too).
        wait_until(
            lambda: (
                f'"{srv.base}/reward?token=' in (log := srv.log.read_text(errors="replace"))
                and log.count('"GET /') >= len(VISITS) + len(RAW) + 1
            ),
            60,
            lambda: f"every request in the access log:\n{srv.log_tail()}",
        )
        log = srv.log.read_text(errors="replace")
    assert SECRET not in log, [ln for ln in log.splitlines() if SECRET in ln]
    access = [ln for ln in log.splitlines() if '"GET /' in ln]
    assert len(access) >= len(VISITS) + len(RAW) + 1, log[-2000:]
    assert sum("token=[redacted]" in ln for ln in access) >= 3
    assert any("%74oken=[redacted]" in ln for ln in access)
    assert any(f'"{srv.base}/reward?token=[redacted]"' in ln for ln in access)  # the Referer field
    assert any("run=trl-ppo-small&token=[redacted]&step=3" in ln for ln in access)


def test_log002_dev_server_request_log_redacts_the_token(contract_root, tmp_path):
    """`app.py serve` (gunicorn, started by the command line) logs its requests without the token too."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLBOARD_")}
    env.update(RLBOARD_ROOT=str(contract_root), RLBOARD_CACHE_DIR=str(tmp_path), RLBOARD_TOKEN=SECRET)
    proc = subprocess.Popen(
        [sys.executable, "app.py", "serve", "--port", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def health():
            try:
                return requests.get(base + "/healthz", timeout=60).status_code == 200
            except requests.ConnectionError:
                return proc.poll() is not None  # not listening yet, unless it ended (said below)

        wait_until(health, 180, "app.py serve to answer /healthz", interval=0.3)
        assert proc.poll() is None, proc.communicate(timeout=30)[0]
        _visit(base)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert SECRET not in out, [ln for ln in out.splitlines() if SECRET in ln]
    assert "GET /?token=[redacted] HTTP/1.1" in out, out[-2000:]


def test_log003_redact():
    """Only the token parameter's value goes, whatever its spelling; other parameters stay."""
    assert redact("GET /?token=abc HTTP/1.1") == "GET /?token=[redacted] HTTP/1.1"
    assert redact("run=x&token=abc&b=1") == "run=x&token=[redacted]&b=1"
    assert redact("token=abc") == "token=[redacted]"
    assert redact("/?%74%6F%6b%65%6e=abc;x=1") == "/?%74%6F%6b%65%6e=[redacted];x=1"
    assert redact("/?tokens=abc&mytoken=d") == "/?tokens=abc&mytoken=d"
    assert redact("") == "" and redact(None) is None and redact(5) == 5
