"""Folders and files of the rollout root the board may not read: the reason in words, what to do, and a
memory of failures so that nothing unreadable is tried again on every request.

A rollout folder belongs to whoever launched the training (often mode 0700), not to the uid the board
runs as (10001 in the image): a failed read is reported, never raised into a page or the health check.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

# The reasons a read fails, as a user reads them (the rest: the system's own words, in lower case).
_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "no such folder",
    errno.ENOTDIR: "not a folder",
    errno.ESTALE: "stale file handle (a network share unmounted?)",
    errno.ENOTCONN: "not connected (a network share unmounted?)",
    errno.EIO: "input/output error",
}
# Reasons for which the fix is to mount the folder rather than to grant access to it.
_GONE = (errno.ENOENT, errno.ESTALE, errno.ENOTCONN)


def reason_of(exc: OSError) -> str:
    """``"permission denied"``, ``"no such folder"``, …: why ``exc`` stopped a read."""
    return _REASONS.get(exc.errno) or (exc.strerror or type(exc).__name__).lower()


def status_of(exc: OSError) -> str:
    """The rollout root's state after ``exc``: ``"missing: no such folder"``, ``"unreadable: permission
    denied"`` (what /healthz reports)."""
    return f"{'missing' if exc.errno in _GONE else 'unreadable'}: {reason_of(exc)}"


def server_identity() -> str:
    """Who the board runs as: ``"uid 10001, gid 10001"`` (plus other groups when it has some)."""
    gid = os.getgid()
    others = sorted(set(os.getgroups()) - {gid})
    extra = f" (also in groups {', '.join(map(str, others))})" if others else ""
    return f"uid {os.getuid()}, gid {gid}{extra}"


def owner_of(path) -> str | None:
    """``"owned by uid 1000, gid 1000, mode 0700"``, or None when even that cannot be read."""
    if not isinstance(path, str | os.PathLike):
        return None  # an object store's folder has no owner nor mode
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"owned by uid {st.st_uid}, gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}"


@dataclass(frozen=True)
class Fix:
    """One way out: what to do, in words, and the command that does it (may be empty)."""

    text: str
    command: str = ""


@dataclass(frozen=True)
class AccessProblem:
    """Why the rollout root (or a folder in it) cannot be read, and what to do about it."""

    path: str
    status: str  # "unreadable: permission denied", "missing: no such folder", …
    owner: str | None  # "owned by uid 1000, gid 1000, mode 0700"
    server: str  # "uid 10001, gid 10001"
    gone: bool  # missing or unmounted (mount it) rather than forbidden (grant access)
    remote: bool = False  # on an object store (s3://…): read with the AWS_* variables, not as a uid

    @classmethod
    def of(cls, path, exc: OSError) -> AccessProblem:
        remote = not isinstance(path, str | os.PathLike)
        return cls(str(path), status_of(exc), owner_of(path), server_identity(), exc.errno in _GONE, remote)

    @property
    def headline(self) -> str:
        """``"The rollout folder /data cannot be read: permission denied."``"""
        verb = "is not there" if self.gone else "cannot be read"
        return f"The rollout folder {self.path} {verb}: {self.status.split(': ', 1)[1]}."

    @property
    def detail(self) -> str:
        """Whose folder it is and who the board runs as (on an object store: what it reads it with)."""
        if self.remote:
            return f"The board reads it with the {STORAGE_SETTINGS} it was started with."
        owner = f"It is {self.owner}; t" if self.owner else "T"
        return f"{owner}he board runs as {self.server}."

    def fixes(self) -> list[Fix]:
        if self.remote:
            return store_fixes(self.path)
        return mount_fixes() if self.gone else grant_fixes()


# What an object store is read with (see data.config.storage_options).
STORAGE_SETTINGS = "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION variables"


def store_fixes(url: str) -> list[Fix]:
    """Ways out when a rollout root on an object store (``url``) cannot be listed."""
    return [
        Fix(
            "Check the bucket and prefix of RLBOARD_ROOT (or --root), and that these variables name a server "
            "and credentials that may list it; with the same variables set, this lists it as the board does:",
            f'aws s3 ls {url}/ --endpoint-url "$AWS_ENDPOINT_URL"',
        ),
    ]


def mount_fixes() -> list[Fix]:
    """Ways out when the rollout folder is not there (never mounted, or a share gone)."""
    return [
        Fix(
            "Mount the rollout folder (with Docker: -v /path/to/rollouts:/data:ro), or point RLBOARD_ROOT "
            "at it. A network share: check that it is mounted on the host.",
        ),
    ]


def grant_fixes() -> list[Fix]:
    """Ways out when the board may not read a folder: run as its owner, grant access, or mount a copy."""
    uid = os.getuid()
    return [
        Fix(
            "Run the container as the owner of the rollouts (the user who launched the training), with "
            "that user's uid and gid:",
            'docker run --user "$(id -u):$(id -g)" -v /path/to/rollouts:/data:ro …',
        ),
        Fix(
            f"Make the folder readable by uid {uid}, the board's (on the host):",
            f"setfacl -R -m u:{uid}:rX /path/to/rollouts    # or: chmod -R o+rX /path/to/rollouts",
        ),
        Fix(
            "Mount a readable copy instead:",
            "rsync -a /path/to/rollouts/ /srv/rollouts-copy/ && chmod -R o+rX /srv/rollouts-copy",
        ),
    ]


# Said after the fixes: a failed read is tried again after a back-off of at most a minute (Board).
AGAIN = "The board looks again by itself within a minute: no restart is needed."


@dataclass(frozen=True)
class Unreadable:
    """Folders of a readable rollout root, or files of a readable run, that the board may not read: the
    rest is shown without them."""

    where: str  # the folder they are in
    kind: str  # "folder" or "file"
    lines: list[str]  # "run-b: permission denied (owned by uid 1000, gid 1000, mode 0700)"
    server: str

    @classmethod
    def of(cls, where, kind: str, reasons: dict[str, str]) -> Unreadable:
        """``reasons``: ``{name: reason}`` of the folders or files in ``where`` (names as listed there)."""
        lines = []
        for name, reason in reasons.items():
            local = isinstance(where, str | os.PathLike)
            owner = owner_of(os.path.join(where, name)) if local else None
            lines.append(f"{name}: {reason}" + (f" ({owner})" if owner else ""))
        return cls(str(where), kind, lines, server_identity())

    @property
    def headline(self) -> str:
        n = len(self.lines)
        what = f"{n} {self.kind}{'s' if n != 1 else ''}"
        if self.kind == "folder":
            return f"{what} under {self.where} cannot be read: not shown as runs."
        return f"{what} of this run cannot be read: {'their' if n != 1 else 'its'} lines are not shown."

    @property
    def detail(self) -> str:
        return f"The board runs as {self.server}."

    def fixes(self) -> list[Fix]:
        return grant_fixes()


class Backoff:
    """Failed reads remembered per key: until its retry time a key answers with the remembered reason, and
    the wait doubles with each failure in a row (``first`` to ``most`` seconds); a success forgets it."""

    def __init__(self, first: float = 1.0, most: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.first, self.most, self.clock = first, most, clock
        self._lock = threading.Lock()
        self._failed: dict[Hashable, tuple[object, float, float]] = {}

    def pending(self, key: Hashable):
        """The remembered failure of ``key`` while it must not be tried again yet, else None."""
        with self._lock:
            hit = self._failed.get(key)
        return hit[0] if hit is not None and self.clock() < hit[1] else None

    def failed(self, key: Hashable, what) -> None:
        """Remember that ``key`` failed with ``what`` (any value: an exception, a reason)."""
        with self._lock:
            prev = self._failed.get(key)
            delay = self.first if prev is None else min(self.most, prev[2] * 2)
            self._failed[key] = (what, self.clock() + delay, delay)

    def retry_in(self, key: Hashable) -> float:
        """Seconds until ``key`` may be tried again (0 when it may be now)."""
        with self._lock:
            hit = self._failed.get(key)
        return 0.0 if hit is None else max(0.0, hit[1] - self.clock())

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self._failed.pop(key, None)
