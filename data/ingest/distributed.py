"""A run's files read on a Ray cluster (``app.py ingest --ray``): a backfill spread over the machines a lab
already trains on.

The driver (:func:`ingest_run`, holding the store's lock) splits the files with something new into tasks
of about equal bytes, and gives each task a range of part ids of its own. Each task reads its files as a
local ingest does (:func:`data.ingest.run.read_files` into a writer of its own: the same blocks, fast and
slow paths, issues and parts), writes its parts into the run's store, which the workers must reach (a
shared folder), and returns its writer's manifest data. The driver records each task's parts in its own
writer, in the order of the tasks (:meth:`_Writer.adopt`), and commits there; a task that fails or a worker
lost before the end commits nothing of the tasks not yet recorded: the next ingest reads their files again,
into the same part ids, and the files they left are overwritten or collected as garbage.

``ray`` is an optional dependency (``uv sync --extra ray``); nothing here imports it until a cluster is
used. The workers need the board's dependencies (the same image or virtualenv); the ``data`` package
itself is shipped to them by the job's runtime environment, so they run the driver's code.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from data.ingest import companions
from data.ingest.files import COMPRESSED, PARQUET
from data.ingest.run import Progress, read_files
from data.ingest.writer import _Writer
from data.store.manifest import Draft

MISSING = "--ray needs the ray package: uv sync --extra ray (or pip install 'ray>=2.40')"
TASKS_PER_CPU = 2  # tasks of about equal bytes per CPU of the cluster: a slow task delays the end less
MIN_TASK_BYTES = 16 << 20  # smaller runs make fewer tasks (each costs a round trip and a writer)
FILE_BYTES = 64 << 10  # a file with nothing new still costs a stat and a fingerprint: counted as this much
COMPRESSION = 32  # a compressed file's text taken as at most this many times its size (more: a task again)
DATA_PACKAGE = Path(__file__).resolve().parents[1]


class OutOfPartIds(Exception):
    """A task needed more part ids than it was given (a file that decompresses to more than was guessed)."""


def ray_missing() -> str | None:
    """Why ``--ray`` cannot run here (no ``ray`` installed), or None."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return MISSING
    return None


def unreachable(address: str | None) -> str | None:
    """Why the Ray cluster at ``address`` (``host:port``; None: ``RAY_ADDRESS``) cannot be reached, or None
    (also for other forms, ``auto`` or ``ray://…``, which Ray resolves itself). Asked before joining: Ray
    itself retries an address nothing listens on for minutes."""
    import socket

    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address == "auto" or "://" in address:
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return f"not a Ray address (host:port): {address!r}"
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        return f"cannot reach the Ray cluster at {address}: {e.strerror or e}"
    return None


def connect(address: str | None = None) -> bool:
    """Join the Ray cluster at ``address`` (None: ``RAY_ADDRESS``, else a local cluster of this machine's
    CPUs) unless this process has joined one already; True when it joined now (then it leaves it after)."""
    # `uv run` makes Ray ship the working folder and start each worker with `uv run`: a copy of the project
    # and an environment built on every worker. The workers use their own environment and get `data` below.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    if ray.is_initialized():
        return False
    ray.init(
        address=address,
        runtime_env=runtime_env(),
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    return True


def runtime_env() -> dict:
    """The job's runtime environment: the driver's ``data`` package on every worker."""
    return {"py_modules": [str(DATA_PACKAGE)], "excludes": ["__pycache__"]}


def spread_on_ray(address: str | None = None, min_task_bytes: int = MIN_TASK_BYTES):
    """The ``spread`` of :func:`data.ingest.ingest_run` that reads the files on the Ray cluster at ``address``
    (see :func:`connect`), in tasks of at least ``min_task_bytes`` new bytes where the run has that many.
    Its ``nodes`` attribute collects the ids of the nodes the tasks ran on."""

    def spread(
        writer: _Writer,
        run_dir: Path,
        paths: list[Path],
        chunk_bytes: int,
        limits: dict[str, int],
        progress: Progress | None = None,
        total: int = 0,
    ) -> tuple[int, dict[str, str]]:
        joined = connect(address)
        try:
            return _drive(
                writer, run_dir, paths, chunk_bytes, limits, progress, total, spread.nodes, min_task_bytes
            )
        finally:
            if joined:
                import ray

                ray.shutdown()

    spread.nodes = []
    return spread


def _new_bytes(writer: _Writer, rel: str, size: int) -> int:
    entry = writer.m.data["files"].get(rel)
    if entry is None or entry.get("whole"):
        return size
    return max(0, size - entry.get("offset", 0))


def _ids_needed(rel: str, size: int, new: int, chunk_bytes: int, tail_open: bool) -> int:
    """Part ids a file's reading may take: one per block (a block holds at least half a chunk unless a line
    is longer), one for an unterminated last line, one for the rest of a line taken without its newline.
    A file with nothing new takes none unless it was rewritten (then its task runs again with more)."""
    if rel.endswith(PARQUET):
        return 1 if new else 0
    if rel.endswith(COMPRESSED):
        return math.ceil(size * COMPRESSION / chunk_bytes) + 1 if new else 0
    if not new:
        return 0
    return math.ceil(new / max(chunk_bytes // 2, 1)) + 1 + int(tail_open)


def _tasks(writer: _Writer, run_dir: Path, paths: list[Path], limits: dict[str, int], cpus: int, least: int):
    """The files in tasks of about equal new bytes, each a run of consecutive files (the run's order):
    ``[(paths, {rel: new bytes}), …]``."""
    weights = {}
    for p in paths:
        rel = p.relative_to(run_dir).as_posix()
        try:
            size = min(p.stat().st_size, limits.get(rel, 1 << 62))
        except OSError:  # gone or unreadable: its task says so, as a local ingest does
            size = 0
        weights[p] = (rel, size, _new_bytes(writer, rel, size))
    total = sum(max(new, FILE_BYTES) for _, _, new in weights.values())
    target = max(total / max(cpus * TASKS_PER_CPU, 1), least)
    tasks: list[list[Path]] = []
    load = 0.0
    for p in paths:
        cost = max(weights[p][2], FILE_BYTES)
        if not tasks or load + cost > target:
            tasks.append([])
            load = 0.0
        tasks[-1].append(p)
        load += cost
    return tasks, weights


def _drive(
    writer, run_dir, paths, chunk_bytes, limits, progress, total, nodes, min_task_bytes
) -> tuple[int, dict[str, str]]:
    import ray

    cpus = max(int(ray.cluster_resources().get("CPU", 1)), 1)
    tasks, weights = _tasks(writer, run_dir, paths, limits, cpus, min_task_bytes)
    data = writer.m.data
    convert = ray.remote(num_cpus=1, max_retries=3)(_convert)
    cursor = data["next_part"]  # the next free part id
    row_group_size = data["row_group_size"]

    def submit(k: int, room: int):
        nonlocal cursor
        first, cursor = cursor, cursor + room
        rels = [weights[p][0] for p in tasks[k]]
        files = {rel: data["files"][rel] for rel in rels if rel in data["files"]}
        pending = {rel: data["pending"][rel] for rel in rels if rel in data["pending"]}
        ref = convert.remote(
            writer.dir,
            run_dir,
            tasks[k],
            first,
            first + room,
            writer.pad_tokens,
            writer.options,
            chunk_bytes,
            {rel: limits[rel] for rel in rels if rel in limits},
            files,
            pending,
            row_group_size,
        )
        return ref, room, first + room

    def room_of(k: int, whole: bool = False) -> int:
        """Part ids task ``k`` may take (``whole``: each of its files read again from the start)."""
        return sum(
            _ids_needed(
                rel,
                size,
                size if whole else new,
                chunk_bytes,
                data["files"].get(rel, {}).get("tail_open", False),
            )
            for rel, size, new in (weights[p] for p in tasks[k])
        )

    running = {}  # ref -> (task, ids given, end of its ids)
    for k in range(len(tasks)):
        ref, room, end = submit(k, room_of(k))
        running[ref] = (k, room, end)
    results: dict[int, dict] = {}
    ends: dict[int, int] = {}
    merged = 0  # tasks recorded in the writer, in order
    again = False  # a task ran again with more ids: its ids lie after later tasks'
    done = 0
    unreadable: dict[str, str] = {}
    while running:
        ready, _ = ray.wait(list(running), num_returns=1)
        k, room, end = running.pop(ready[0])
        try:
            results[k] = ray.get(ready[0])
        except OutOfPartIds:
            again = True
            # A file rewritten (read again from 0), or decompressing to more than guessed.
            ref, room, end = submit(k, max(4 * room, room_of(k, whole=True), 16))
            running[ref] = (k, room, end)
            continue
        ends[k] = end
        done += results[k]["bytes"]
        if progress:
            progress(done, total)
        while merged in results:
            _record(writer, results.pop(merged), unreadable, nodes)
            data["next_part"] = max(data["next_part"], ends[merged])
            merged += 1
            # A commit now and then, as a local ingest makes, of the tasks recorded so far: the ids of
            # those still running all lie at or above next_part (garbage collection leaves them alone).
            due = max(writer.commit_every, 19 * writer.last_commit_cost)
            if running and not again and time.monotonic() - writer.last_commit >= due:
                writer.commit(complete=False)
    data["next_part"] = max([data["next_part"], cursor])
    return done, unreadable


def _record(writer: _Writer, found: dict, unreadable: dict[str, str], nodes: list) -> None:
    """Take a task's result into the driver's writer: its files' entries, their parts and what it noted."""
    data = writer.m.data
    for rel in found["dropped"]:  # read again from the start (rewritten): the old parts go
        if rel in data["files"]:
            writer.drop_file(rel)
    writer.adopt(found)
    for rel in found["rels"]:
        data["pending"].pop(rel, None)
    data["files"].update(found["files"])
    data["pending"].update(found["pending"])
    unreadable.update(found["unreadable"])
    writer.options.reading.formed.update(found["formed"])
    nodes.append(found["node"])


class _TaskWriter(_Writer):
    """A task's writer: part ids only from its range, no commit (the driver commits), files read again
    from the start noted (the driver drops their old parts)."""

    def __init__(self, *args, end: int):
        super().__init__(*args)
        self.end = end
        self.dropped: list[str] = []

    def write_chunk(self, rel, chunk) -> int:
        if self.m.data["next_part"] >= self.end:
            raise OutOfPartIds(f"{rel}: more parts than the {self.end} ids given")
        return super().write_chunk(rel, chunk)

    def drop_file(self, rel: str) -> None:
        self.dropped.append(rel)
        super().drop_file(rel)

    def maybe_commit(self) -> None:
        pass


def _convert(
    store_dir: Path,
    run_dir: Path,
    paths: list[Path],
    first: int,
    end: int,
    pad_tokens: tuple[str, ...],
    options,
    chunk_bytes: int,
    limits: dict[str, int],
    files: dict,
    pending: dict,
    row_group_size: int,
) -> dict:
    """A Ray task: read ``paths`` (from where the committed ``files`` entries stopped) into parts of the
    store numbered ``first`` to ``end - 1``; returns what the driver records (see :func:`_record`)."""
    import ray

    draft = Draft.empty(run_dir.name, "", pad_tokens)
    draft.data.update(next_part=first, files=files, pending=pending, row_group_size=row_group_size)
    writer = _TaskWriter(store_dir, draft, pad_tokens, options, end=end)
    try:
        done, unreadable = read_files(writer, run_dir, paths, chunk_bytes, limits)
        writer.flush()
        companions.count_joined(options.reading, draft.data["files"])  # the lines joined here, in the entries
    finally:
        writer.close()
    rels = [p.relative_to(run_dir).as_posix() for p in paths]
    data = draft.data
    return {
        "rels": rels,
        "files": {rel: data["files"][rel] for rel in rels if rel in data["files"]},
        "pending": {rel: data["pending"][rel] for rel in rels if rel in data["pending"]},
        "parts": data["parts"],
        "ends": writer.ends.added(),
        "packs": data.get("packs", []),
        "extra_columns": data.get("extra_columns", []),
        "token_extras": data.get("token_extras", []),
        "ignored_fields": data["ignored_fields"],
        "columns": writer._columns,
        "written": writer._written,
        "formed": dict(options.reading.formed),
        "dropped": writer.dropped,
        "unreadable": unreadable,
        "bytes": done,
        "node": ray.get_runtime_context().get_node_id(),
    }
