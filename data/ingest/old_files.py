"""Collection of a store's old files: those no committed manifest names any more, deleted by the writer
that wrote them or, once old, by any writer. Mixed into :class:`data.ingest.writer._Writer`."""

from __future__ import annotations

import time
from pathlib import Path

from data.derived.base import Commit
from data.derived.ends import FILE_KEY as ENDS_FILE
from data.derived.registry import collect_all
from data.derived.steps import CELLS_KEY
from data.store.layout import entry_name, name_id, name_tag
from data.store.manifest import packed_parts
from data.store.table import MANIFESTS

# A file of the store no committed manifest names is deleted by the writer that wrote it, or by any writer
# once it is this old (another writer's, left by a crash or a lost commit; or one that readers of an older
# commit may still open).
GRACE_SECONDS = 600
# A loose part's file that a pack replaced is deleted once its part is this many parts behind the newest: a
# reader of an older commit may still open it until then.
KEEP_BEHIND = 64


class OldFiles:
    """Deleting what no commit names: uses the writer's ``dir``, ``m`` (its draft manifest),
    ``_committed_tags``, ``_table_state`` and ``_written``."""

    def _removable(self, path: Path) -> bool:
        """Whether a file no committed manifest names may be deleted: this writer's or a committed writer's,
        or an old one. (A file of another tag may be a writer's that read this commit and has not committed
        yet: it may still win the next commit.)"""
        if name_tag(path.name) in self._committed_tags:
            return True
        try:
            return time.time() - path.stat().st_mtime > GRACE_SECONDS
        except FileNotFoundError:
            return False

    def _collect_garbage(self, c: Commit) -> None:
        """Remove files no committed manifest names any more (kept one generation for slow readers)."""
        parts = self.m.data["parts"]
        packs = self.m.data.get("packs", [])
        loose = {int(k) for k in parts} - packed_parts(packs)
        names = {pack["name"] for pack in packs}
        kept = {entry_name(i, parts[str(i)]) for i in loose} | names
        floor = self.m.data["next_part"]
        held = set(self._table_state)
        self._committed_tags |= _tags(self.m.data)
        for p in (self.dir / "parts").glob("*/p*.parquet"):
            rel = p.relative_to(self.dir).as_posix()
            if rel not in held and name_id(p.name) < floor - KEEP_BEHIND and self._removable(p):
                p.unlink(missing_ok=True)
        for sub in ("scalars", "issues"):
            for p in (self.dir / sub).glob("*.parquet"):
                if p.name in kept:
                    continue
                # A pack whose parts were all dropped, or left by a crash; a loose part's file once it is
                # no newer than the last KEEP_BEHIND parts.
                if (p.name.startswith("k") or name_id(p.name) < floor - KEEP_BEHIND) and self._removable(p):
                    p.unlink(missing_ok=True)
        for p in (self.dir / MANIFESTS).glob("g*.json"):
            if p.name not in (self.m.data["manifest_file"], c.old.get("manifest_file")) and self._removable(
                p
            ):
                p.unlink(missing_ok=True)
        collect_all(c, self._removable)

    def remove_written(self) -> None:
        """Delete every file this writer wrote (its commit was refused: no manifest names them)."""
        for p in self._written:
            p.unlink(missing_ok=True)


def _tags(data: dict | None) -> set[str | None]:
    """The tags of the writers whose files a manifest's ``data`` names (committed writers)."""
    if not data:
        return set()
    names = [p["name"] for p in data.get("packs", [])] + [
        data.get("steps_file") or "",
        data.get(CELLS_KEY) or "",
        data.get(ENDS_FILE) or "",
        data.get("manifest_file") or "",
    ]
    return {e.get("tag") for e in data["parts"].values()} | {name_tag(n) for n in names if n}
