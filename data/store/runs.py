"""Run discovery: the runs under the rollout root and their files (never a path joined from a name), and
what could not be read there."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from data.access import AccessProblem, Backoff, reason_of
from data.remote import RemotePath, as_path
from data.schema.dialects import ROLLOUT_SUFFIXES, TRAIN, VALIDATION, split_of


class UnknownRun(LookupError):
    """A run name that is not one of the runs found under the rollout root."""


# Folders below a run as trainers lay them out (TRL's completions/, prime-rl's rollouts/step_{n}/train/all/)
# are looked into this deep; folders that never hold rollouts (a checkpoint's weights, W&B's files) are not.
MAX_DEPTH = 5
_SKIPPED = re.compile(r"^(checkpoint.*|wandb|__pycache__|node_modules|weights|broadcasts)$")
# prime-rl writes each step's rollouts twice: all of them (all/), and the ones trained on (effective/).
_SUBSET_ALL, _SUBSET_EFFECTIVE = "all", "effective"
VALIDATION_SUFFIX = " (validation)"


def is_rollout_file(name: str) -> bool:
    """A file a run's rollouts may be in: ``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst`` or ``*.parquet``."""
    return any(name.endswith(s) and len(name) > len(s) for s in ROLLOUT_SUFFIXES)


def run_files(run_dir: Path, split: str = TRAIN) -> list[Path]:
    """The rollout files of a run (of its training files, or of its ``"validation"`` ones), sorted by their
    path inside the run (symlinks that leave the run folder are skipped)."""
    run_dir = as_path(run_dir)
    if isinstance(run_dir, RemotePath):  # with what the listing said of each (no request a stat)
        return [run_dir.child(name, st) for name, st in run_file_stats(run_dir, split)]
    return [run_dir / name for name, _ in run_file_stats(run_dir, split)]


def run_file_stats(run_dir: Path, split: str = TRAIN) -> list[tuple[str, os.stat_result]]:
    """``(path inside the run, stat)`` of each of :func:`run_files` (see :func:`_walk`)."""
    return [(rel, st) for rel, st in _walk(run_dir) if split_of(rel) == split]


def _walk(run_dir: Path) -> list[tuple[str, os.stat_result]]:
    """``(path inside the run, stat)`` of every rollout file of a run folder, in one walk of the folder (a run of one
    file per step has thousands: a ``Path`` and two ``stat`` calls each took a runs page 1-3 s at 10,000
    files). Only a symlink can lead out of the folder: only symlinks are resolved. Sub-folders are looked
    into (``MAX_DEPTH`` deep, not hidden ones nor those of ``_SKIPPED``); a prime-rl ``effective/`` folder
    beside an ``all/`` one is not read (the same episodes again)."""
    if isinstance(run_dir, RemotePath):
        return _walk_remote(run_dir)
    run_dir = Path(run_dir)
    real_run: list[Path] = []
    out: list[tuple[str, os.stat_result]] = []

    def inside(path: Path) -> bool:
        if not real_run:
            real_run.append(run_dir.resolve())
        try:
            path.resolve().relative_to(real_run[0])
        except (ValueError, OSError):
            return False
        return True

    def walk(folder: Path, prefix: str, depth: int) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        names = {e.name for e in entries}
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                if e.is_symlink() and not inside(folder / e.name):
                    continue
                if e.is_dir():
                    skip = _SKIPPED.match(e.name) or (e.name == _SUBSET_EFFECTIVE and _SUBSET_ALL in names)
                    if depth < MAX_DEPTH and not skip:
                        try:
                            walk(folder / e.name, f"{prefix}{e.name}/", depth + 1)
                        except OSError:
                            continue  # a sub-folder it may not read: its files are not the run's
                elif is_rollout_file(e.name) and e.is_file():
                    out.append((prefix + e.name, e.stat()))
            except OSError:
                continue

    walk(run_dir, "", 0)
    return sorted(out, key=lambda item: item[0])


def _walk_remote(run_dir: RemotePath) -> list[tuple[str, os.stat_result]]:
    """:func:`_walk` of a folder on an object store: one listing of every key below it, kept by the same
    rules (``MAX_DEPTH``, hidden and ``_SKIPPED`` folders, prime-rl's ``effective/`` beside ``all/``)."""
    listed = run_dir.walk_files()
    folders = {rel.rsplit("/", 1)[0] for rel, _ in listed if "/" in rel}
    children: dict[str, set[str]] = {}  # folder -> the names of the folders in it
    for folder in folders:
        parts = folder.split("/")
        for i in range(len(parts)):
            children.setdefault("/".join(parts[:i]), set()).add(parts[i])
    out = []
    for rel, st in listed:
        *dirs, name = rel.split("/")
        if len(dirs) > MAX_DEPTH or name.startswith(".") or not is_rollout_file(name):
            continue
        skip = False
        for i, d in enumerate(dirs):
            siblings = children.get("/".join(dirs[:i]), set())
            if d.startswith(".") or _SKIPPED.match(d) or (d == _SUBSET_EFFECTIVE and _SUBSET_ALL in siblings):
                skip = True
                break
        if not skip:
            out.append((rel, st))
    return out


@dataclass(frozen=True)
class RootScan:
    """What :func:`scan_root` found: the runs, and what it could not read (with the reason)."""

    root: Path
    runs: dict[str, Path]
    problem: AccessProblem | None = None  # the root itself cannot be listed
    unreadable: dict[str, str] = field(default_factory=dict)  # sub-folder name -> reason
    # The runs that are another run's validation files (``"<run> (validation)"``): their split, not TRAIN.
    splits: dict[str, str] = field(default_factory=dict)
    # Sub-folders that are links out of the root: name -> where they lead. The board reads only inside
    # the root, so they are no runs; said, so that a root of linked runs is not just "no runs found".
    outside: dict[str, str] = field(default_factory=dict)

    def split(self, name: str) -> str:
        """Which of its folder's files a run is made of: ``"train"`` or ``"validation"``."""
        return self.splits.get(name, TRAIN)

    @property
    def status(self) -> str:
        """``"ok"``, or the root's problem (``"unreadable: permission denied"``, ``"missing: …"``)."""
        return "ok" if self.problem is None else self.problem.status

    @property
    def trouble(self) -> str | None:
        """One sentence for a page left without runs by what could not be read (else None)."""
        if self.problem is not None:
            return self.problem.headline
        if not self.runs and self.unreadable:
            n = len(self.unreadable)
            return f"{n} folder{'s' if n != 1 else ''} under {self.root} cannot be read."
        if not self.runs and self.outside:
            n = len(self.outside)
            return (
                f"{n} folder{'s' if n != 1 else ''} under {self.root} "
                f"{'are links' if n != 1 else 'is a link'} out of it, which the board does not follow."
            )
        return None


# Folders a file system puts at its root that are never runs (lost+found is 0700 root's).
_NOT_RUNS = ("lost+found",)


def _splits(folder: Path) -> set[str]:
    """Which splits a run folder has files of (see :func:`run_file_stats`); raises OSError when the folder
    itself cannot be listed."""
    return {split_of(rel) for rel, _ in _walk(folder)}


def folder_runs(name: str, folder: Path) -> dict[str, str]:
    """The runs one folder makes: ``{run name: split}``, ``name`` for its training files and
    ``"<name> (validation)"`` for its validation files, where it has them."""
    found = _splits(folder)
    out = {}
    if TRAIN in found:
        out[name] = TRAIN
    if VALIDATION in found:
        out[name + VALIDATION_SUFFIX] = VALIDATION
    return out


def scan_root(root: Path, memory: Backoff | None = None) -> RootScan:
    """Runs under the rollout root: ``runs`` holds ``{name: folder}`` for each direct sub-folder holding
    rollout files (see :func:`run_file_stats`: in the folder or in folders below it, as trainers lay them
    out); never raises for what the board may not read. A folder's validation or evaluation files
    (:func:`data.schema.dialects.split_of`) are a run of their own, ``"<name> (validation)"``.

    A root that itself holds rollout files is also a run (named after the folder). Sub-folders that
    resolve outside the root (symlinks) are not runs. A root that cannot be listed (not readable, gone) is
    ``problem``; a sub-folder that cannot be, ``unreadable[name]``. With ``memory``, a failed listing is
    not tried again before its back-off ends (the remembered answer is given instead).
    """
    root = as_path(root)
    runs: dict[str, Path] = {}
    remembered = memory.pending(("root", str(root))) if memory is not None else None
    if remembered is not None:
        return RootScan(root, runs, problem=remembered)
    try:
        entries = sorted(root.iterdir())
    except OSError as e:
        problem = AccessProblem.of(root, e)
        if memory is not None:
            memory.failed(("root", str(root)), problem)
        return RootScan(root, runs, problem=problem)
    if memory is not None:
        memory.succeeded(("root", str(root)))
    unreadable: dict[str, str] = {}
    splits: dict[str, str] = {}
    outside: dict[str, str] = {}
    real_root = root.resolve()

    def add(name: str, folder: Path) -> None:
        for run, split in folder_runs(name, folder).items():
            runs[run] = folder
            if split != TRAIN:
                splits[run] = split

    for p in entries:
        if p.name.startswith(".") or p.name in _NOT_RUNS or not p.is_dir():
            continue
        try:
            p.resolve().relative_to(real_root)
        except ValueError:
            outside[p.name] = str(p.resolve())
            continue
        key = ("folder", str(p))
        reason = memory.pending(key) if memory is not None else None
        if reason is None:
            try:
                add(p.name, p)
            except OSError as e:
                reason = reason_of(e)
                if memory is not None:
                    memory.failed(key, reason)
            else:
                if memory is not None:
                    memory.succeeded(key)
        if reason is not None:
            unreadable[p.name] = reason
    if not runs and any(is_rollout_file(f.name) and f.is_file() for f in entries):
        add(root.resolve().name, root)
    return RootScan(root, runs, unreadable=unreadable, splits=splits, outside=outside)


def discover_runs(root: Path) -> dict[str, Path]:
    """Runs under the rollout root (see :func:`scan_root`): ``{name: folder}``; empty when the root
    cannot be read."""
    return scan_root(root).runs
