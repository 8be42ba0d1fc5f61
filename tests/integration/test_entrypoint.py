"""The image's entry point (docker/entrypoint.sh) run as an unprivileged uid, as under `docker run --user`:
where the store goes for each state of the cache folder, and what the log says about the rollout root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.unprivileged import AS_ROOT, NOBODY, as_unprivileged, make_unreadable, open_folder, remove

REPO = Path(__file__).resolve().parents[2]
UID = NOBODY if AS_ROOT else os.getuid()


def _entry(cache: Path, root: Path) -> tuple[str, str]:
    """Run the entry point with the command `echo $RLBOARD_CACHE_DIR`; (that output, the log)."""
    env = {"PATH": os.environ["PATH"], "RLBOARD_CACHE_DIR": str(cache), "RLBOARD_ROOT": str(root)}
    cmd = as_unprivileged(
        ["sh", str(REPO / "docker" / "entrypoint.sh"), "sh", "-c", 'echo "$RLBOARD_CACHE_DIR"']
    )
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), out.stderr


@pytest.fixture
def folders():
    made = []

    def make(writable: bool = False) -> Path:
        made.append(open_folder(writable))
        return made[-1]

    yield make
    for path in made:
        remove(path)


def test_entrypoint001_writable_cache(folders):
    """A cache folder this uid may write (a new named volume): used as it is, nothing logged."""
    cache, root = folders(writable=True), folders()
    assert _entry(cache, root) == (str(cache), "")


def test_entrypoint002_cache_not_writable(folders):
    """A cache folder of another uid (an older volume, a host folder): the store goes to a temporary
    folder and the log says so and how to keep it."""
    cache, root = folders(), folders()
    if not AS_ROOT:
        cache.chmod(0o555)
    used, log = _entry(cache, root)
    try:
        assert used.startswith("/tmp/rlboard-cache.") and Path(used).is_dir()
        assert f"rlboard: {cache} is not writable by uid {UID}" in log
        assert f"chown the volume to uid {UID} to keep it" in log
    finally:
        remove(Path(used))


def test_entrypoint003_stores_of_another_uid(folders):
    """A writable cache holding another uid's stores (the container ran under another --user before):
    this uid keeps its own in uid-<uid>, leaving those alone."""
    cache, root = folders(writable=True), folders()
    other = cache / "run-0123abcd"
    other.mkdir()
    if not AS_ROOT:
        other.chmod(0o555)
    used, log = _entry(cache, root)
    assert used == f"{cache}/uid-{UID}" and Path(used).is_dir()
    assert f"holds stores of another uid; uid {UID} keeps its own in {cache}/uid-{UID}" in log


def test_entrypoint004_rollouts_not_readable(folders):
    """A rollout folder of mode 0700 that is not this uid's: the log says so and gives --user; the server
    is started anyway (to say the same on its pages)."""
    cache, root = folders(writable=True), folders()
    make_unreadable(root)
    used, log = _entry(cache, root)
    assert used == str(cache)
    assert f"rlboard: {root} cannot be read by uid {UID}" in log
    assert 'docker run --user "$(id -u):$(id -g)"' in log and "Serving anyway." in log


def test_entrypoint005_rollouts_missing(folders):
    """No rollout folder mounted: the log says how to mount one."""
    cache = folders(writable=True)
    _, log = _entry(cache, cache / "data")
    assert f"rlboard: no rollout folder at {cache / 'data'}: mount one with -v /path/to/rollouts:" in log


def test_entrypoint006_stores_on_object_storage(folders):
    """RLBOARD_CACHE_DIR=s3://…: the URL is passed on as it is, the stores' working copies go to
    RLBOARD_WORK_DIR (the volume), checked as the cache folder is: a folder of another uid is replaced by
    a temporary one, said in the log; no local folder named after the URL is made."""
    work, root = folders(writable=True), folders()
    env = {"PATH": os.environ["PATH"], "RLBOARD_CACHE_DIR": "s3://stores/board", "RLBOARD_ROOT": str(root)}
    echo = 'echo "$RLBOARD_CACHE_DIR $RLBOARD_WORK_DIR"'
    cmd = as_unprivileged(["sh", str(REPO / "docker" / "entrypoint.sh"), "sh", "-c", echo])
    out = subprocess.run(
        cmd, env={**env, "RLBOARD_WORK_DIR": str(work)}, capture_output=True, text=True, cwd="/"
    )
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, f"s3://stores/board {work}", "")
    assert not Path("/s3:").exists()
    closed = folders()
    if not AS_ROOT:
        closed.chmod(0o555)
    out = subprocess.run(
        cmd, env={**env, "RLBOARD_WORK_DIR": str(closed)}, capture_output=True, text=True, cwd="/"
    )
    url, used = out.stdout.split()
    try:
        assert url == "s3://stores/board" and used.startswith("/tmp/rlboard-cache.") and Path(used).is_dir()
        assert f"rlboard: {closed} is not writable by uid {UID}" in out.stderr
    finally:
        remove(Path(used))
