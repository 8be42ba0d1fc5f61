"""Run discovery: the runs under the rollout root and their files (never a path joined from a name), and
what could not be read there."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from data.access import AccessProblem, Backoff, reason_of


class UnknownRun(LookupError):
    """A run name that is not one of the runs found under the rollout root."""


def run_files(run_dir: Path) -> list[Path]:
    """The JSON-lines files of a run, sorted by name (symlinks that leave the run folder are skipped)."""
    return [Path(run_dir) / name for name, _ in run_file_stats(run_dir)]


def run_file_stats(run_dir: Path) -> list[tuple[str, os.stat_result]]:
    """``(name, stat)`` of each of :func:`run_files`, in one read of the folder (a run of one file per step
    has thousands: a ``Path`` and two ``stat`` calls each took a runs page 1-3 s at 10,000 files). Only a
    symlink can lead out of the folder: only symlinks are resolved."""
    run_dir = Path(run_dir)
    real_run = None
    out = []
    with os.scandir(run_dir) as entries:
        found = sorted((e for e in entries if e.name.endswith(".jsonl")), key=lambda e: e.name)
    for e in found:
        if e.name == ".jsonl":  # no suffix: a hidden file's name
            continue
        try:
            if e.is_symlink():
                real_run = real_run or run_dir.resolve()
                (run_dir / e.name).resolve().relative_to(real_run)
            if not e.is_file():
                continue
            out.append((e.name, e.stat()))
        except (ValueError, OSError):
            continue
    return out


@dataclass(frozen=True)
class RootScan:
    """What :func:`scan_root` found: the runs, and what it could not read (with the reason)."""

    root: Path
    runs: dict[str, Path]
    problem: AccessProblem | None = None  # the root itself cannot be listed
    unreadable: dict[str, str] = field(default_factory=dict)  # sub-folder name -> reason

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
        return None


# Folders a file system puts at its root that are never runs (lost+found is 0700 root's).
_NOT_RUNS = ("lost+found",)


def scan_root(root: Path, memory: Backoff | None = None) -> RootScan:
    """Runs under the rollout root: ``runs`` holds ``{name: folder}`` for each direct sub-folder holding
    ``*.jsonl``; never raises for what the board may not read.

    A root that itself holds ``*.jsonl`` files is also a run (named after the folder). Sub-folders that
    resolve outside the root (symlinks) are not runs. A root that cannot be listed (not readable, gone) is
    ``problem``; a sub-folder that cannot be, ``unreadable[name]``. With ``memory``, a failed listing is
    not tried again before its back-off ends (the remembered answer is given instead).
    """
    root = Path(root)
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
    real_root = root.resolve()
    for p in entries:
        if p.name.startswith(".") or p.name in _NOT_RUNS or not p.is_dir():
            continue
        try:
            p.resolve().relative_to(real_root)
        except ValueError:
            continue
        key = ("folder", str(p))
        reason = memory.pending(key) if memory is not None else None
        if reason is None:
            try:
                holds_jsonl = any(f.suffix == ".jsonl" for f in p.iterdir())
            except OSError as e:
                reason = reason_of(e)
                if memory is not None:
                    memory.failed(key, reason)
            else:
                if memory is not None:
                    memory.succeeded(key)
                if holds_jsonl:
                    runs[p.name] = p
        if reason is not None:
            unreadable[p.name] = reason
    if not runs and any(f.suffix == ".jsonl" and f.is_file() for f in entries):
        runs[root.resolve().name] = root
    return RootScan(root, runs, unreadable=unreadable)


def discover_runs(root: Path) -> dict[str, Path]:
    """Runs under the rollout root (see :func:`scan_root`): ``{name: folder}``; empty when the root
    cannot be read."""
    return scan_root(root).runs
