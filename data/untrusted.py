"""What lies in the rollout root is untrusted: its paths resolved without ever raising (a symlink loop, a
dangling link), and its small files (settings, trainer logs, tokenizers) read by one bounded reader that
takes only a regular file inside the root, of at most a set size, never blocking on a FIFO or a device."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from data.remote import RemotePath

# Settings and logs are a few KB to a few MB: a TRL trainer_state.json of 100k steps is ~30 MB.
SETTINGS_BYTES = 1 << 20  # rlboard.toml
LOG_BYTES = 64 << 20  # trainer_state.json, log_history.json
TOKENIZER_BYTES = 64 << 20  # tokenizer.json (a 256k-token vocabulary is ~20 MB)
# Nesting deeper than this in a settings file or a trainer log is refused before it is parsed (the
# parsers recurse: 100k levels of brackets exhaust Python's stack).
MAX_DEPTH = 64


class Refused(Exception):
    """A file of the rollout root that the board does not read, with the reason (said to the user)."""


def real_path(path: Path) -> tuple[Path | None, str | None]:
    """``(the path with every link resolved, None)``, or ``(None, why not)`` for a link that loops, leads
    nowhere or cannot be followed. Never raises (``Path.resolve`` raises RuntimeError on a loop)."""
    try:
        return Path(os.path.realpath(path, strict=True)), None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, "a symlink loop"
        if e.errno == errno.ENOENT:
            return None, "a link to nothing (dangling)"
        return None, f"cannot be followed ({e.strerror or e})"
    except (ValueError, RuntimeError) as e:  # a NUL byte in a name; a loop on an older Python
        return None, f"cannot be followed ({e})"


def inside(path: Path, folder: Path) -> tuple[bool, str | None]:
    """``(True, None)`` when ``path`` resolves inside ``folder`` (both resolved), else ``(False, why)``:
    a path leading out of it, or a link that loops or dangles."""
    try:  # where it leads, as far as it can be followed (never raises on a loop)
        base = Path(os.path.realpath(folder))
        real = Path(os.path.realpath(path))
    except (OSError, ValueError) as e:
        return False, f"cannot be followed ({e})"
    if real != base and base not in real.parents:
        return False, f"a link out of {Path(folder).name}/ (to {real})"
    real, why = real_path(path)
    return (True, None) if real is not None else (False, why)


def special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is (``"a FIFO"``, …), else None."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return None


def read_bounded(path: Path, limit: int, root: Path | None = None, what: str = "file") -> bytes:
    """The bytes of a small file of the rollout root: a regular file (not a FIFO, a device or a socket:
    opened without blocking and checked on the open descriptor), inside ``root`` where given, of at most
    ``limit`` bytes. Raises :class:`Refused` (with the reason and the limit) for anything else, OSError
    for a file that cannot be read."""
    if isinstance(path, RemotePath):
        size = path.stat().st_size
        if size > limit:
            raise Refused(f"{what} is {size:,} bytes, over the limit of {limit:,}")
        return path.read_bytes()
    if root is not None and stat.S_ISLNK(os.lstat(path).st_mode):  # (FileNotFoundError where there is none)
        ok, why = inside(path, root)
        if not ok:
            raise Refused(f"{what} is {why}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        kind = special_kind(st.st_mode)
        if kind is not None or not stat.S_ISREG(st.st_mode):
            raise Refused(f"{what} is {kind or 'not a regular file'}")
        if st.st_size > limit:
            raise Refused(f"{what} is {st.st_size:,} bytes, over the limit of {limit:,}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # it grew while being read
            raise Refused(f"{what} is over the limit of {limit:,} bytes")
        return data
    finally:
        os.close(fd)


def nesting_depth(text: bytes | str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of ``[``/``{`` in a JSON or TOML text, counting no further than ``limit + 1``
    (brackets inside strings count too: an over-estimate, which only refuses a file sooner)."""
    if isinstance(text, str):
        text = text.encode("utf-8", "replace")
    depth = deepest = 0
    for b in text.translate(None, _NOT_BRACKETS):
        if b in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif depth:
            depth -= 1
    return deepest


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def check_depth(text: bytes | str, what: str, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`Refused` when ``text`` nests deeper than ``limit``."""
    if nesting_depth(text, limit) > limit:
        raise Refused(f"{what} nests deeper than {limit} levels")
