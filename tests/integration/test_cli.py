"""The command line: ingest --json, export, and one-line errors with exit code 2 for bad arguments."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT
from tests.waiting import wait_until


def run_cli(*args, cache):
    return subprocess.run(
        [sys.executable, "app.py", *args, "--cache-dir", str(cache)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli001_ingest_json_summary(fixtures_dir, tmp_path):
    """`ingest ROOT --json` prints one JSON object with one entry per run."""
    p = run_cli("ingest", str(fixtures_dir), "--json", cache=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    runs = {r["run"]: r for r in out["runs"]}
    assert runs["trl-ppo-small"] == {
        "run": "trl-ppo-small",
        "files": 2,
        "samples": 400,
        "steps": 25,
        "tokens": runs["trl-ppo-small"]["tokens"],
        "bad_lines": 0,
    }
    assert runs["trl-ppo-small"]["tokens"] > 0
    assert runs["rlloggingboard-eval-poem"]["tokens"] == 0
    # One run folder works too.
    p = run_cli("ingest", str(fixtures_dir / "trl-grpo-small"), "--json", cache=tmp_path)
    assert [r["run"] for r in json.loads(p.stdout)["runs"]] == ["trl-grpo-small"]


def test_cli002_export_csv_one_step(fixtures_dir, tmp_path):
    """`export --run R --step S` writes one row per response of the step with the documented columns."""
    out = tmp_path / "step3.csv"
    p = run_cli(
        "export", str(fixtures_dir), "--run", "trl-ppo-small", "--step", "3", "-o", str(out), cache=tmp_path
    )
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 16
    for col in (
        "sample_id",
        "step",
        "reward",
        "ref_reward",
        "reward_gain",
        "response_length",
        "log_ratio_mean",
        "log_ratio_sum",
        "kl_mean",
        "kl_sum",
        "prompt",
        "response",
    ):
        assert col in rows[0]
    expected = []
    for f in ("rank0.jsonl", "rank1.jsonl"):
        for line in (fixtures_dir / "trl-ppo-small" / f).read_text().splitlines():
            d = json.loads(line)
            if d["step"] == 3:
                expected.append((d["prompt"], d["reward"]))
    assert sorted((r["prompt"], float(r["reward"])) for r in rows) == sorted(expected)


def test_cli003_export_jsonl_and_parquet(fixtures_dir, tmp_path):
    """JSON lines and Parquet exports hold the same rows as the files."""
    import polars as pl

    p = run_cli("export", str(fixtures_dir), "--run", "trl-grpo-small", "--format", "jsonl", cache=tmp_path)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 400
    out = tmp_path / "all.parquet"
    p = run_cli(
        "export",
        str(fixtures_dir),
        "--run",
        "trl-grpo-small",
        "--format",
        "parquet",
        "-o",
        str(out),
        cache=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert pl.read_parquet(out).height == 400


def test_cli004_bad_arguments_exit_2_with_one_line(fixtures_dir, tmp_path):
    """Unknown run, missing folder, unknown format: one-line error, exit code 2 (a step the run lacks is no
    error: see test_cli011)."""
    cases = [
        ("export", str(fixtures_dir), "--run", "nope"),
        ("export", str(fixtures_dir), "--run", "../etc"),
        ("ingest", str(tmp_path / "missing")),
        ("export", str(fixtures_dir), "--run", "trl-ppo-small", "--format", "xml"),
        ("serve", "--root", str(tmp_path / "missing")),
    ]
    for args in cases:
        p = run_cli(*args, cache=tmp_path)
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), (args, p.stderr)
        assert "Traceback" not in p.stderr


def test_cli005_export_csv_cells_never_start_a_formula(tmp_path):
    """`export --format csv` neutralises formula cells as /export does (OWASP's single quote)."""
    from tests.integration.test_export import check_formula_csv, formula_run

    run = formula_run(tmp_path / "root")
    out = tmp_path / "out.csv"
    p = run_cli("export", str(run.parent), "--run", "formulas", "-o", str(out), cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    check_formula_csv(out.read_bytes().decode("utf-8"))


def small_root(tmp_path):
    """A rollout root with one small run in the contract (2 steps of 3 responses), written here so the test
    needs no fixtures."""
    run = tmp_path / "root" / "tiny"
    run.mkdir(parents=True)
    lines = [
        json.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": i / 10, "step": 1 + i // 3})
        for i in range(6)
    ]
    (run / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    return run.parent


def test_cli006_cli_py_is_the_command_line(tmp_path):
    """`python cli.py …` and `python app.py …` are the same command line."""
    root = small_root(tmp_path)
    outs = []
    for script in ("cli.py", "app.py"):
        p = subprocess.run(
            [sys.executable, script, "ingest", str(root), "--json", "--cache-dir", str(tmp_path / script)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
    assert outs[0] == outs[1]
    assert outs[0]["runs"][0]["samples"] == 6 and outs[0]["runs"][0]["steps"] == 2


def test_cli007_serve(tmp_path):
    """`python app.py serve --root R --port P` serves the app with gunicorn, as the image does: /healthz
    counts the run, a page renders, and no development-server warning is printed."""
    import os
    import signal

    import requests

    from tests.conftest import free_port

    root = small_root(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "serve", "--root", str(root), "--port", str(port)]
            + ["--cache-dir", str(tmp_path / "cache")],
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def health():
            assert proc.poll() is None, log.read_text()
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=60)
            except requests.ConnectionError:
                return None  # not listening yet

        r = wait_until(health, 180, lambda: f"the server to listen:\n{log.read_text()}", interval=0.3)
        assert r.status_code == 200 and r.json()["runs"] == 1
        assert requests.get(f"http://127.0.0.1:{port}/reward?run=tiny", timeout=120).status_code == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    text = log.read_text()
    assert f"http://127.0.0.1:{port}/" in text
    # The server the image runs (gunicorn, its threads and timeouts), not Flask's development server and its
    # red warning on every start.
    assert "Using worker: gthread" in text and "development server" not in text, text[-2000:]


def test_cli008_bad_serve_address_exit_2_with_one_line(tmp_path):
    """A port out of range or not a number (flag or RLBOARD_PORT), a port already taken, an unknown flag:
    one-line error, exit code 2, no traceback, and nothing served."""
    import os
    import socket

    root = small_root(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cases = [
            (["--port", "99999"], {}, "port 99999 is out of range"),
            (["--port", "http"], {}, "not a port number: 'http'"),
            (["--port", "0"], {}, "out of range"),
            ([], {"RLBOARD_PORT": "70000"}, "RLBOARD_PORT=70000 is out of range"),
            (["--port", str(taken.getsockname()[1])], {}, "Address already in use"),
            (["--verbose"], {}, "unrecognized arguments: --verbose"),
        ]
        for args, env, text in cases:
            p = subprocess.run(
                [sys.executable, "app.py", "serve", "--root", str(root), *args, "--cache-dir", str(tmp_path)],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, **env},
            )
            assert p.returncode == 2, (args, env, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error:") and text in lines[0], (args, p.stderr)


def test_cli009_unreadable_folder_one_line(fixtures_dir):
    """`ingest` of a folder this user may not read (mode 0700, another user's): a one-line error with the
    owner, the user it runs as and exit code 2, not a traceback; a run folder inside a readable root that
    it may not read is skipped with a warning, and the others are ingested."""
    from tests.unprivileged import (
        as_unprivileged,
        make_unreadable,
        open_folder,
        readable_copy,
        remove,
        unprivileged_python,
    )

    exe, env = unprivileged_python()
    root, cache = open_folder(), open_folder(writable=True)
    try:
        for run in ("trl-ppo-small", "trl-grpo-small"):
            readable_copy(fixtures_dir / run, root / run)
        make_unreadable(root / "trl-grpo-small")

        def ingest(path):
            cmd = as_unprivileged([exe, "app.py", "ingest", str(path), "--json", "--cache-dir", str(cache)])
            env_all = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
            return subprocess.run(
                cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env_all
            )

        p = ingest(root)
        assert p.returncode == 0, p.stderr
        assert [r["run"] for r in json.loads(p.stdout)["runs"]] == ["trl-ppo-small"]
        assert f"warning: {root / 'trl-grpo-small'}: permission denied; skipped" in p.stderr
        make_unreadable(root)
        p = ingest(root)
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.startswith(
            f"error: The rollout folder {root} cannot be read: permission denied. It is owned"
        )
        assert len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr
    finally:
        remove(root)
        remove(cache)


def test_cli020_ingest_on_a_full_disk_is_one_line(fixtures_dir, tmp_path):
    """`ingest` that cannot write its store (here a file-size limit, as a full disk fails a write) exits 1
    with one error line naming the run, the cache and the reason; no traceback."""
    import resource
    import signal

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    p = subprocess.run(
        [
            sys.executable,
            "app.py",
            "ingest",
            str(fixtures_dir / "trl-ppo-small"),
            "--cache-dir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_files,
    )
    assert p.returncode == 1, (p.returncode, p.stderr[-500:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == [
        f"error: cannot store run 'trl-ppo-small' in {tmp_path}: File too large",
        "error: 1 of 1 runs failed: trl-ppo-small",
    ], p.stderr[-800:]


def test_cli011_a_failed_run_costs_only_itself(tmp_path):
    """A root of three runs whose second cannot be stored (before: the ingest stopped there, the third run
    never read): the others are read, the JSON summary names the failure, the exit code says it."""
    from data.config import DEFAULT_PAD_TOKENS
    from data.store import store_dir_for

    root = tmp_path / "root"
    for name in ("a", "b", "c"):
        (root / name).mkdir(parents=True)
        line = {"prompt": "p", "response": "r", "reward": 1.0, "step": 1}
        (root / name / "rank0.jsonl").write_text(json.dumps(line) + "\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    blocked = store_dir_for(cache, root / "b", DEFAULT_PAD_TOKENS)
    blocked.write_text("a file where the store's folder goes")
    p = subprocess.run(
        [sys.executable, "app.py", "ingest", str(root), "--cache-dir", str(cache), "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stderr[-800:]
    runs = json.loads(p.stdout.strip().splitlines()[-1])["runs"]
    assert [r["run"] for r in runs] == ["a", "b", "c"]
    assert runs[0]["samples"] == 1 and runs[2]["samples"] == 1
    assert runs[1]["error"].startswith("cannot store run 'b' in ")
    assert "error: 1 of 3 runs failed: b" in p.stderr


def test_cli010_help_shows_the_commands():
    """`app.py --help` is the whole command line's help (its commands, serve the default), not serve's
    options; `app.py COMMAND --help` shows that command's options."""
    top = subprocess.run(
        [sys.executable, "app.py", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert top.returncode == 0, top.stderr
    listed = re.findall(r"^\s{4}(\w+)\s+\S", top.stdout, flags=re.M)
    assert listed == ["serve", "ingest", "export", "query", "snapshot"], top.stdout
    assert "--cache-dir" not in top.stdout and "Without a command, app.py serves" in top.stdout
    serve = subprocess.run(
        [sys.executable, "app.py", "serve", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 0 and "--port PORT" in serve.stdout and "--root ROOT" in serve.stdout
