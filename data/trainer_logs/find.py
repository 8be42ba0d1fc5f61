"""Where a run's trainer logs are looked for, inside its run folder only (the board reads nothing outside
the rollout root): Hugging Face / TRL ``trainer_state.json``, saved ``log_history`` JSON and TensorBoard
event files. See :func:`find_logs` for the exact places."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from data import untrusted
from data.remote import RemotePath

# Files bigger than these are listed with a note and not read (a log of scalars is a few MB at most; a
# bigger file is something else, e.g. TensorBoard histograms and images of a long run).
MAX_JSON_BYTES = 128 << 20
MAX_EVENTS_BYTES = 512 << 20
# TensorBoard folders are looked for this deep below the run folder: HF's default ``logging_dir`` is
# ``<output_dir>/runs/<date>_<host>`` (depth 2).
EVENTS_DEPTH = 2

TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
_EVENTS = "events.out.tfevents."


@dataclass(frozen=True)
class LogFile:
    """One trainer log found: ``kind`` ``"trainer_state"``, ``"log_history"`` or ``"tensorboard"`` (a folder
    of event files); ``rel`` its path inside the run folder (``"."`` for the folder itself); ``size`` in
    bytes (all event files of a folder); ``stamp`` what changes when it is rewritten (sizes and mtimes)."""

    kind: str
    path: Path
    rel: str
    size: int
    stamp: tuple


def _inside(run_dir: Path, entry: os.DirEntry, real_run: list) -> bool:
    """False for a symlink that leads out of the run folder, loops or dangles (it is never followed)."""
    if not entry.is_symlink():
        return True
    return untrusted.inside(Path(entry.path), run_dir)[0]


def _scan(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _file(kind: str, run_dir: Path, entry: os.DirEntry) -> LogFile | None:
    try:
        st = entry.stat()
    except OSError:
        return None
    rel = os.path.relpath(entry.path, run_dir)
    return LogFile(kind, Path(entry.path), rel, st.st_size, ((rel, st.st_size, st.st_mtime_ns),))


def find_logs(run_dir: Path) -> list[LogFile]:
    """The trainer logs of a run, in the order they are merged (a later one wins a step both give):

    1. ``checkpoint-<N>/trainer_state.json`` of the highest ``N`` (each checkpoint holds the whole history
       up to it, so only the last is read), then ``trainer_state.json`` in the run folder (written by
       ``trainer.save_state()`` at the end of training);
    2. ``*log_history*.json`` in the run folder (``trainer.state.log_history`` saved by hand, e.g. TRL's
       ``trl_log_history.json``), by name;
    3. every folder holding ``events.out.tfevents.*`` files: the run folder and its sub-folders up to
       :data:`EVENTS_DEPTH` levels down (``runs/<date>_<host>/``), by path.

    Symlinks that lead out of the run folder are not followed; unreadable folders are skipped.
    """
    if isinstance(run_dir, RemotePath):
        return []  # logs on an object store are not looked for (the rollouts are read; see docs/object-storage.md)
    run_dir = Path(run_dir)
    real: list = []
    top = [e for e in _scan(run_dir) if _inside(run_dir, e, real)]
    out: list[LogFile] = []

    checkpoints = []
    for e in top:
        m = _CHECKPOINT.fullmatch(e.name)
        if m and e.is_dir():
            state = [s for s in _scan(Path(e.path)) if s.name == TRAINER_STATE and _inside(run_dir, s, real)]
            if state and state[0].is_file():
                checkpoints.append((int(m.group(1)), state[0]))
    if checkpoints:
        f = _file("trainer_state", run_dir, max(checkpoints, key=lambda c: c[0])[1])
        out += [f] if f else []
    for e in top:
        if e.name == TRAINER_STATE and e.is_file():
            f = _file("trainer_state", run_dir, e)
            out += [f] if f else []
    for e in top:
        if e.name.endswith(".json") and "log_history" in e.name and e.is_file():
            f = _file("log_history", run_dir, e)
            out += [f] if f else []
    out += _event_folders(run_dir, run_dir, 0, real)
    return out


def _event_folders(run_dir: Path, folder: Path, depth: int, real: list) -> list[LogFile]:
    entries = [e for e in _scan(folder) if _inside(run_dir, e, real)]
    events = []
    for e in entries:
        if e.name.startswith(_EVENTS) and e.is_file():
            try:
                st = e.stat()
            except OSError:
                continue
            events.append((e.name, st.st_size, st.st_mtime_ns))
    out = []
    if events:
        rel = os.path.relpath(folder, run_dir)
        out.append(LogFile("tensorboard", folder, rel, sum(s for _, s, _ in events), (rel, *events)))
    if depth < EVENTS_DEPTH:
        for e in entries:
            if e.is_dir() and not e.name.startswith("."):
                out += _event_folders(run_dir, Path(e.path), depth + 1, real)
    return out
