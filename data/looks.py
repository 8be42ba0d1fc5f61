"""What the board compares between two looks at a run's files (see data.service.Board.refresh): their
signature, and whether they are old enough to be whole."""

from __future__ import annotations

import time
from pathlib import Path

from data.store import run_file_stats

# A process's first look at a run takes its files as whole at once when none changed for this long (by this
# machine's clock); otherwise only after they are seen still for SETTLE_SECONDS (compared between looks).
OLD_SECONDS = 60.0


def signature(run_dir: Path, split: str = "train") -> tuple:
    """Each file of the run: ``(name, size, mtime, ctime)`` (the change time too: a file made readable
    again, chmod, is read at the next look); ``()`` when the folder cannot be listed (the ingest says so)."""
    try:
        files = run_file_stats(run_dir, split)
    except OSError:
        return ()
    return tuple((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for name, st in files)


def all_old(sig: tuple) -> bool:
    """True when every file of a signature was last modified at least OLD_SECONDS ago by this clock: a run
    no trainer writes (a file server's clock may differ by less than that)."""
    return all(mtime <= time.time_ns() - OLD_SECONDS * 1e9 for _, _, mtime, _ in sig)
