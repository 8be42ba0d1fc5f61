"""Running code as a user who may not read a folder, as the board does in its container (uid 10001) before a
rollout folder of mode 0700 that belongs to the trainer's user.

Tests and CI run as root, and root reads every folder: there, the code under test runs in a child process
as ``nobody`` (uid 65534) and the folders it must use are made accessible to it. Run as another user, the
folders are made unreadable to that user itself (mode 0000).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534
AS_ROOT = os.geteuid() == 0


# util-linux's setpriv, as an image's entry point would switch user; subprocess's own user= fails here to
# exec an interpreter whose folder only root may enter, where setpriv manages.
SETPRIV = shutil.which("setpriv")


def as_unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` run as the unprivileged user (as is when not root)."""
    if not AS_ROOT:
        return cmd
    if SETPRIV is None:
        pytest.skip(
            "running as root without setpriv (util-linux): cannot start a process as an unprivileged user"
        )
    return [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]


# What the unprivileged Python must manage: the project's imports, and starting a Python of its own (the
# search helper of data/bounded.py is a child process run as sys.executable).
_PROBE = (
    "import subprocess, sys; import gunicorn, dash, polars, data.store; "
    "subprocess.run([sys.executable, '-c', 'import polars'], check=True)"
)


@functools.cache
def _python() -> tuple[str, dict[str, str]] | str:
    """An interpreter the unprivileged user can run and start again by itself, with the environment it
    needs: this one, or (when this one lives under a folder only root may enter, as pyenv's under /root)
    the system's Python of the same version with this environment's packages on PYTHONPATH. Else why not."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = sysconfig.get_paths()["purelib"]
    candidates = [(sys.executable, {})]
    if AS_ROOT and (system := shutil.which(version, path="/usr/local/bin:/usr/bin")):
        candidates.append((system, {"PYTHONPATH": site_packages}))
    why = ""
    for exe, env in candidates:
        probe = subprocess.run(
            as_unprivileged([exe, "-c", _PROBE]),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
        )
        if probe.returncode == 0:
            return exe, env
        why += (
            f"{exe}: {probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode}; "
        )
    return why


def unprivileged_python() -> tuple[str, dict[str, str]]:
    """``(interpreter, environment variables to add)`` for running the project as the unprivileged user;
    skips the test, saying why, when there is none."""
    found = _python()
    if isinstance(found, str):
        pytest.skip(f"cannot run the project in {REPO} as uid {NOBODY} with any Python here: {found}")
    return found


def require_unprivileged_python() -> None:
    """Skip the test, saying why, when the project cannot be run as the unprivileged user."""
    unprivileged_python()


def open_folder(writable: bool = False) -> Path:
    """A new folder outside pytest's tmp_path (mode 0700 under root's /tmp/pytest-of-root) that the
    unprivileged user may list; ``writable``: its own (a cache), else root's (a rollout root, which
    :func:`make_unreadable` can then close to it)."""
    path = Path(tempfile.mkdtemp(prefix="rlboard-unpriv-"))
    path.chmod(0o755)
    if writable and AS_ROOT:
        os.chown(path, NOBODY, NOBODY)
    return path


def readable_copy(src: Path, dest: Path) -> Path:
    """Copy ``src`` to ``dest`` readable by everyone (the shared fixtures are read-only: 0555 / 0444)."""
    shutil.copytree(src, dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def make_unreadable(path: Path) -> None:
    """Make ``path`` unreadable by the unprivileged user: root's and mode 0700 / 0600 as root, else 0000."""
    if AS_ROOT:
        path.chmod(0o700 if path.is_dir() else 0o600)
    else:
        path.chmod(0)


def remove(path: Path) -> None:
    """Delete a folder made by these helpers, whatever modes were set in it."""
    for p in [path, *path.rglob("*")] if path.exists() else []:
        try:
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o700)
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)


def run_as_unprivileged(code: str, timeout: float = 120) -> str:
    """Run Python ``code`` from the project's root as the unprivileged user; its stdout (fails on error)."""
    exe, env = unprivileged_python()
    out = subprocess.run(
        as_unprivileged([exe, "-c", code]),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
