"""A run's store as a Delta Lake table: its files of ``parts/`` (one row per response, every column), laid
out Hive-style by step range (``parts/step_block=<n>/``), committed to a transaction log in the store's
folder (``_delta_log/``) so that DuckDB, Polars, Spark or Trino read a run's store directly.

The commit protocol is Delta's: a commit is the file ``_delta_log/<version>.json``, created only if absent
(put-if-absent on a local disk and on S3). Each ingest commit is made on top of the version its writer read,
with no retry, so of two writers (two replicas sharing a store, on two hosts) that read the same version
only one commits the next; the other gets :class:`CommitConflict` and leaves the run to the winner.

The table and the store's manifest agree: each commit carries the manifest's generation as the app
transaction ``txn(rlboard, generation)`` and names, in its commit info, the manifest file of that
generation (``manifests/g<generation>-<writer>.json``, written before the commit). ``manifest.json`` is a
copy of it put in place after the commit succeeded: readers trust ``manifest.json`` (one small read per
request); a writer trusts the log, and repairs ``manifest.json`` from it when they disagree (a writer that
died between its commit and the copy).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson
import polars as pl
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from data.store.layout import STEP_BLOCK_COLUMN, part_file_path

APP_ID = "rlboard"  # the app transaction of ingest commits: its version is the manifest's generation
MANIFEST_KEY = "rlboard.manifest"  # in a commit's info: the manifest file of its generation
MANIFESTS = "manifests"  # the folder of the manifests commits name
LOG = "_delta_log"
# In ``manifest.json`` (not in the commit's own manifest file, written before the commit): the table's version
# that holds it. While the log has no later commit, a writer trusts ``manifest.json`` without opening the
# table (see :func:`last_version`).
TABLE_VERSION = "table_version"


class CommitConflict(Exception):
    """Another writer committed the run's table after this one read it: this writer's commit is refused."""


def open_table(store_dir: Path) -> DeltaTable | None:
    """The store's table at its last version (None when no commit was made yet)."""
    try:
        return DeltaTable(str(store_dir))
    except TableNotFoundError:
        return None


class TableAt:
    """The store's table at ``version``, opened only when a commit needs it: a check of a run that finds
    nothing new commits nothing, and opening the table (its whole log) cost it 15-35 ms at 2.56M responses.
    A commit made on it is made on that version, as on a table opened then (see :func:`commit_table`)."""

    def __init__(self, store_dir: Path, version: int):
        self.dir = Path(store_dir)
        self.version = version
        self._table: DeltaTable | None = None

    def get(self) -> DeltaTable:
        if self._table is None:
            self._table = DeltaTable(str(self.dir), version=self.version)
        return self._table


def last_version(store_dir: Path, data: dict) -> int | None:
    """The version of the store's table that a manifest's ``data`` (from ``manifest.json``) names, when the
    log holds no later commit; else None (one a later commit overtook: read the log)."""
    version = data.get(TABLE_VERSION)
    if not isinstance(version, int) or (Path(store_dir) / LOG / f"{version + 1:020d}.json").exists():
        return None
    return version


def committed_manifest(store_dir: Path, table: DeltaTable) -> tuple[int, dict | None]:
    """``(generation, manifest data)`` as ``table``'s last version names them (data None when the commit
    names none, or its file is gone)."""
    generation = table.transaction_version(APP_ID) or 0
    info = table.history(1)[0]
    name = info.get(MANIFEST_KEY)
    if not name:
        return generation, None
    try:
        return generation, orjson.loads((Path(store_dir) / MANIFESTS / name).read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        return generation, None


def table_files(data: dict) -> dict[str, tuple[int, int, int | None, int | None]]:
    """The files of ``parts/`` a manifest's state holds, by path in the store: ``(step block, rows, smallest
    step, largest step)`` each (see the parts' ``blocks`` in :mod:`data.ingest.writer`)."""
    out = {}
    for k, e in data["parts"].items():
        for block, _, rows, lo, hi in e.get("blocks", ()):
            out[part_file_path(int(e.get("in", k)), e.get("tag"), block)] = (block, rows, lo, hi)
    return out


def delta_schema(columns: dict[str, pl.DataType]) -> Schema:
    """The Delta schema of parts of Polars ``columns`` and the partition column."""
    frame = pl.DataFrame(schema={**columns, STEP_BLOCK_COLUMN: pl.Int64})
    return Schema.from_arrow(frame.to_arrow().schema)


def _add(store_dir: Path, path: str, block: int, rows: int, lo: int | None, hi: int | None) -> AddAction:
    st = os.stat(Path(store_dir) / path)
    stats = {"numRecords": rows}
    if lo is not None and hi is not None:
        stats.update(minValues={"step": lo}, maxValues={"step": hi}, nullCount={"step": 0})
    return AddAction(
        path,
        st.st_size,
        {STEP_BLOCK_COLUMN: str(block)},
        st.st_mtime_ns // 1_000_000,
        True,
        orjson.dumps(stats).decode(),
    )


def commit_table(
    store_dir: Path,
    table: DeltaTable | TableAt | None,
    before: dict[str, tuple],
    after: dict[str, tuple],
    columns: dict[str, pl.DataType],
    generation: int,
    manifest_name: str,
) -> DeltaTable:
    """Commit the files of ``parts/`` of a new state (``after``, see :func:`table_files`) over the state
    ``table`` holds (``before``): the files added and removed, the manifest's ``generation`` as the app
    transaction, ``manifest_name`` in the commit info. ``columns``: the columns of the files added (new ones
    are added to the table's schema first). Returns the table at the new version; raises
    :class:`CommitConflict` when another writer committed since ``table`` was read (nothing is committed)."""
    adds = [_add(store_dir, p, *after[p]) for p in after.keys() - before.keys()]
    now = int(time.time() * 1000)
    removes = [
        RemoveAction(p, True, now, None, {STEP_BLOCK_COLUMN: str(before[p][0])})
        for p in before.keys() - after.keys()
    ]
    props = CommitProperties(
        app_transactions=[Transaction(APP_ID, generation)],
        custom_metadata={MANIFEST_KEY: manifest_name},
        max_commit_retries=0,
    )
    if isinstance(table, TableAt):
        table = table.get()
    try:
        if table is None:
            create_table_with_add_actions(
                str(store_dir),
                delta_schema(columns),
                adds,
                mode="error",
                partition_by=[STEP_BLOCK_COLUMN],
                commit_properties=props,
            )
            return DeltaTable(str(store_dir))
        have = set(table.schema().to_arrow().names)
        new = {c: t for c, t in columns.items() if c not in have}
        if new:
            # A column no earlier part had (a trainer's extra field): added to the schema by a commit of its
            # own, made on the version read like the data's (so it conflicts the same way).
            table.alter.add_columns(
                list(delta_schema(new).fields[:-1]), commit_properties=CommitProperties(max_commit_retries=0)
            )
            table.update_incremental()
        table.create_write_transaction(
            adds + removes,
            "append",
            table.schema(),
            partition_by=[STEP_BLOCK_COLUMN],
            commit_properties=props,
        )
        table.update_incremental()
        return table
    except CommitFailedError as e:
        raise CommitConflict(str(e)) from e
    except DeltaError as e:
        if "already exists" in str(e).lower() or "version" in str(e).lower():
            raise CommitConflict(str(e)) from e
        raise
