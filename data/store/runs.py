"""Run discovery: the runs under the rollout root and their files (never a path joined from a name), and
what could not be read there."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from data import untrusted
from data.access import AccessProblem, Backoff, reason_of
from data.remote import RemotePath, as_path
from data.schema.dialects import ROLLOUT_SUFFIXES, TRAIN, VALIDATION, miles, nemo_gym, prime_rl, split_of


class UnknownRun(LookupError):
    """A run name that is not one of the runs found under the rollout root."""


# Folders below a run as trainers lay them out (TRL's completions/, prime-rl's rollouts/step_{n}/train/all/)
# are looked into this deep; folders that never hold rollouts (a checkpoint's weights, W&B's files) are not.
MAX_DEPTH = 5
_SKIPPED = re.compile(r"^(checkpoint.*|wandb|__pycache__|node_modules|weights|broadcasts)$")
# prime-rl writes each step's rollouts twice: all of them (all/), and the ones trained on (effective/).
_SUBSET_ALL, _SUBSET_EFFECTIVE = "all", "effective"
VALIDATION_SUFFIX = " (validation)"


# Per framework, the files it writes beside its rollouts that are no rollouts: ``(path inside the run, the
# names of the files in its folder) -> why, or None``.
_AUXILIARY = (nemo_gym.auxiliary, miles.auxiliary, prime_rl.auxiliary)


def auxiliary(rel: str, names) -> str | None:
    """Why a rollout-named file is a framework's side file (NeMo Gym's materialized inputs, say), not
    rollouts, or None (see ``_AUXILIARY``)."""
    return next((why for f in _AUXILIARY if (why := f(rel, names)) is not None), None)


def is_rollout_file(name: str) -> bool:
    """A file a run's rollouts may be in: ``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst`` or ``*.parquet``."""
    return any(name.endswith(s) and len(name) > len(s) for s in ROLLOUT_SUFFIXES)


def run_files(run_dir: Path, split: str = TRAIN, aside: list[tuple[str, str]] | None = None) -> list[Path]:
    """The rollout files of a run (of its training files, or of its ``"validation"`` ones), sorted by their
    path inside the run (symlinks that leave the run folder are skipped); a framework's side files are
    appended to ``aside`` as ``(path inside the run, what it is)``."""
    run_dir = as_path(run_dir)
    if isinstance(run_dir, RemotePath):  # with what the listing said of each (no request a stat)
        return [run_dir.child(name, st) for name, st in run_file_stats(run_dir, split, aside=aside)]
    return [run_dir / name for name, _ in run_file_stats(run_dir, split, aside=aside)]


def run_file_stats(
    run_dir: Path,
    split: str = TRAIN,
    skipped: list[tuple[str, str]] | None = None,
    aside: list[tuple[str, str]] | None = None,
) -> list[tuple[str, os.stat_result]]:
    """``(path inside the run, stat)`` of each of :func:`run_files` (see :func:`_walk`); what the walk
    skipped is appended to ``skipped`` as ``(path inside the run, reason)``, a framework's side files of
    the split to ``aside`` (see :func:`auxiliary`)."""
    found: list[tuple[str, str]] = []
    out = [(rel, st) for rel, st in _walk(run_dir, skipped, found) if split_of(rel) == split]
    if aside is not None:
        aside.extend((rel, why) for rel, why in found if split_of(rel) == split)
    return out


def _walk(
    run_dir: Path, skipped: list[tuple[str, str]] | None = None, aside: list[tuple[str, str]] | None = None
) -> list[tuple[str, os.stat_result]]:
    """``(path inside the run, stat)`` of every rollout file of a run folder, in one walk of the folder (a run of one
    file per step has thousands: a ``Path`` and two ``stat`` calls each took a runs page 1-3 s at 10,000
    files). Only a symlink can lead out of the folder: only symlinks are resolved. Sub-folders are looked
    into (``MAX_DEPTH`` deep, not hidden ones nor those of ``_SKIPPED``); a prime-rl ``effective/`` folder
    beside an ``all/`` one is not read (the same episodes again).

    The folder is untrusted: a link that loops, dangles or leads out of the run folder, a FIFO, a device
    or a socket, and a second way to a folder or file already walked (a link back up, two names of one
    file: its rows would count twice) are skipped, each with its reason in ``skipped``; nothing raises
    but the listing of ``run_dir`` itself (OSError). A framework's side files (:func:`auxiliary`) are
    not rollouts: they go to ``aside``."""
    if isinstance(run_dir, RemotePath):
        return _walk_remote(run_dir, skipped, aside)
    run_dir = Path(run_dir)
    out: list[tuple[str, os.stat_result]] = []
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: dict[tuple[int, int], str] = {}

    def skip(rel: str, why: str) -> None:
        if skipped is not None:
            skipped.append((rel, why))

    def walk(folder: Path, prefix: str, depth: int) -> None:
        st = folder.stat()
        seen_dirs.add((st.st_dev, st.st_ino))
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        names = {e.name for e in entries}
        # Links last: a folder or a file reached both by its own name and through a link is read by its own.
        for e in sorted(entries, key=_is_link):
            if e.name.startswith("."):
                continue
            rel = prefix + e.name
            try:
                if e.is_symlink():
                    ok, why = untrusted.inside(folder / e.name, run_dir)
                    if not ok:
                        skip(rel, why)
                        continue
                st = e.stat()
                if stat.S_ISDIR(st.st_mode):
                    skip_dir = _SKIPPED.match(e.name) or (
                        e.name == _SUBSET_EFFECTIVE and _SUBSET_ALL in names
                    )
                    if depth >= MAX_DEPTH or skip_dir:
                        continue
                    if (st.st_dev, st.st_ino) in seen_dirs:
                        skip(rel, "a second way to a folder already read")
                        continue
                    try:
                        walk(folder / e.name, f"{rel}/", depth + 1)
                    except OSError:
                        continue  # a sub-folder it may not read: its files are not the run's
                elif (kind := untrusted.special_kind(st.st_mode)) is not None:
                    skip(rel, kind)
                elif is_rollout_file(e.name) and stat.S_ISREG(st.st_mode):
                    if (why := auxiliary(rel, names)) is not None:
                        if aside is not None:
                            aside.append((rel, why))
                        continue
                    first = seen_files.setdefault((st.st_dev, st.st_ino), rel)
                    if first != rel:
                        skip(rel, f"the same file as {first}")
                        continue
                    out.append((rel, st))
            except OSError:
                continue

    walk(run_dir, "", 0)
    return sorted(out, key=lambda item: item[0])


def _is_link(e: os.DirEntry) -> bool:
    try:
        return e.is_symlink()
    except OSError:
        return True


def _walk_remote(
    run_dir: RemotePath,
    skipped: list[tuple[str, str]] | None = None,
    aside: list[tuple[str, str]] | None = None,
) -> list[tuple[str, os.stat_result]]:
    """:func:`_walk` of a folder on an object store: one listing of every key below it, kept by the same
    rules (``MAX_DEPTH``, hidden and ``_SKIPPED`` folders, prime-rl's ``effective/`` beside ``all/``, side
    files to ``aside``). Keys the object store's client cannot name and directory markers beside a file are
    appended to ``skipped`` (see :meth:`RemotePath.walk_files`)."""
    listed = run_dir.walk_files(skipped)
    folders = {rel.rsplit("/", 1)[0] for rel, _ in listed if "/" in rel}
    names_in: dict[str, set[str]] = {}  # folder -> the names of the files in it
    for rel, _ in listed:
        folder, _, name = rel.rpartition("/")
        names_in.setdefault(folder, set()).add(name)
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
        if skip:
            continue
        if (why := auxiliary(rel, names_in.get("/".join(dirs), ()))) is not None:
            if aside is not None:
                aside.append((rel, why))
            continue
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
    # What the walk did not read and why: a symlink loop, a link out of its run folder, a FIFO, a device,
    # a second way to a file already read (``{path under the root: reason}``).
    skipped: dict[str, str] = field(default_factory=dict)

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


def _splits(folder: Path, skipped: list[tuple[str, str]] | None = None) -> set[str]:
    """Which splits a run folder has files of (see :func:`run_file_stats`); raises OSError when the folder
    itself cannot be listed."""
    return {split_of(rel) for rel, _ in _walk(folder, skipped)}


def folder_runs(name: str, folder: Path, skipped: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """The runs one folder makes: ``{run name: split}``, ``name`` for its training files and
    ``"<name> (validation)"`` for its validation files, where it has them (what the walk skipped is
    appended to ``skipped``, see :func:`_walk`)."""
    found = _splits(folder, skipped)
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
    skipped: dict[str, str] = {}
    local = not isinstance(root, RemotePath)
    try:
        if local:
            entries = sorted(root.iterdir())
        else:  # keys the client cannot name are skipped and said, as a symlink loop is on a disk
            found: list[tuple[str, str]] = []
            entries = root.list_dir(found)
            skipped.update((rel or "./", why) for rel, why in found)
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
    real_root = untrusted.real_path(root)[0] or root if local else root.resolve()

    def add(name: str, folder: Path) -> None:
        found: list[tuple[str, str]] = []
        for run, split in folder_runs(name, folder, found).items():
            runs[run] = folder
            if split != TRAIN:
                splits[run] = split
        prefix = "" if folder is root else f"{name}/"
        skipped.update((prefix + rel or "./", why) for rel, why in found)

    for p in entries:
        if p.name.startswith(".") or p.name in _NOT_RUNS:
            continue
        if local:
            real, why = untrusted.real_path(p)
            if real is None:
                skipped[p.name] = why
                continue
            try:
                kind = untrusted.special_kind(real.stat().st_mode)
            except OSError:
                kind = None
            if kind is not None:
                skipped[p.name] = kind
                continue
            if not real.is_dir():
                continue
            if real != real_root and real_root not in real.parents:
                outside[p.name] = str(real)
                continue
        elif not p.is_dir():
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
    if not runs and any(is_rollout_file(f.name) and _is_file(f) for f in entries):
        add(real_root.name, root)
    return RootScan(root, runs, unreadable=unreadable, splits=splits, outside=outside, skipped=skipped)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def discover_runs(root: Path) -> dict[str, Path]:
    """Runs under the rollout root (see :func:`scan_root`): ``{name: folder}``; empty when the root
    cannot be read."""
    return scan_root(root).runs
