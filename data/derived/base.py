"""What every derived kind shares: the file a store's last commit named for a kind (read), and what the
builders of one commit share (:class:`Commit`, build)."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from data.store.manifest import Manifest, write_atomic
from data.store.reader import RunStore


def read_named(store, kind: str) -> pl.DataFrame | None:
    """The Parquet file of derived kind ``kind`` the store's last commit named; None when it named none,
    or when a later commit collected it (that commit's own file is read instead)."""
    name = store.manifest.derived_name(kind)
    if not name:
        return None
    try:
        return pl.read_parquet(Path(store.dir) / name)
    except FileNotFoundError:
        return None


# The steps summary, the histogram cells and the ends counts, written at each commit and read whole by every
# fresh worker's first page: LZ4 reads them in about half zstd's time (at 5,000 steps: the cells 2.1 ms
# against 4.5, the reward page's summary columns 1.6 against 2.7), for files 20-30% larger, and writes
# them faster.
AGGREGATE_COMPRESSION = "lz4"


@dataclass
class Commit:
    """What the builders of one commit share (see data.derived.registry): the store's folder, the manifest
    ``data`` the commit writes and the writer's own ``draft`` (the same object, or the one a commit made
    mid-read copied from; each entry set goes to both), the entries of the last commit (``old``), the
    generation and writer's tag that name the new files, and the files written and named so far."""

    dir: Path
    data: dict
    draft: dict
    gen: int
    tag: str
    below: int | None  # steps from this one on are hidden (None: every step shown)
    aggregates: bool  # also the prompt lists (a pass over the whole store)
    summaries: Any  # the writer's data.derived.steps.StepSummaries
    ends: Any  # the writer's data.derived.ends.EndsCounts
    top_block: Callable[[], Any]  # the columns the top file's rows keep (see data.derived.text.write_top)
    state: dict  # the files of parts/ the commit holds (data.store.table.table_files)
    old: dict = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)  # deleted should the commit be refused
    named: set[Path] = field(default_factory=set)  # named by the manifest committed

    def file(self, prefix: str, ext: str) -> str:
        """The name of this commit's file of a kind: ``<prefix>-g<generation>-<tag>.<ext>``."""
        return f"{prefix}-g{self.gen:06d}-{self.tag}.{ext}"

    def put(self, name: str, payload: bytes) -> None:
        """Write ``payload`` as the store's file ``name``, which the commit names."""
        self.written.append(self.dir / name)
        write_atomic(self.dir / name, payload)
        self.named.add(self.dir / name)

    def put_frame(self, name: str, frame: pl.DataFrame, compression: str = AGGREGATE_COMPRESSION) -> None:
        buf = io.BytesIO()
        frame.write_parquet(buf, compression=compression)
        self.put(name, buf.getvalue())

    def set(self, entries: dict) -> None:
        """Set manifest entries of the commit (and of the writer's draft)."""
        for d in (self.draft, self.data):
            d.update(entries)

    def store(self) -> RunStore:
        """The state this commit makes, as a reader of the store will see it (the manifest ``data`` so far:
        the entries of the kinds built before the caller's)."""
        return RunStore(Path(self.dir), Manifest.from_dict(self.data))


def collect_named(c: Commit, removable: Callable[[Path], bool], pattern: str, key: str) -> None:
    """Remove the files of ``pattern`` that neither the commit's entry ``key`` nor the last commit's names
    and that ``removable`` says may go (the last commit's kept for slow readers)."""
    keep = {c.draft.get(key), c.old.get(key)}
    for p in c.dir.glob(pattern):
        if p.name not in keep and removable(p):
            p.unlink(missing_ok=True)


def index_missing(
    store_dir: Path,
    folder: str,
    rels: Iterable[str],
    in_store: Callable[[Path, Path], Path],
    write: Callable[[Path, Path], None],
) -> list[Path]:
    """Write, for each file ``rels`` of ``parts/`` (paths in the store) whose file ``in_store(store_dir,
    src)`` in ``folder`` does not exist yet, that file with ``write(src, dst)``; returns those written. A
    file of ``parts/`` never changes, so neither does a file derived from it alone (the text and token
    indexes)."""
    (store_dir / folder).mkdir(exist_ok=True)
    have = set(os.listdir(store_dir / folder))
    written = []
    for rel in rels:
        src = store_dir / rel
        dst = in_store(store_dir, src)
        if dst.name not in have:
            write(src, dst)
            written.append(dst)
    return written
