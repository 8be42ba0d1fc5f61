"""Incremental ingest: read new complete lines of each rollout file, validate, derive metrics, append parts.

Each source file is read from the byte offset reached last time. A chunk of complete lines goes through
Polars in one call (fast path); only when that fails, or the chunk breaks the contract, is it read line by
line so that exactly the bad lines are recorded and every good line is kept (slow path). A part is written
before the manifest that names it, so a crash never leaves a half-counted file.

``files``: one file from its last offset, a block at a time; ``blocks``: blocks of complete lines and
their parsing; ``fast`` and ``slow``: the two paths; ``parts``: a part built from good rows; ``writer``:
parts written on worker threads, and commit points; ``run``: a run under the store's lock.
"""

from data.ingest.run import IngestResult, ingest_run

__all__ = ["IngestResult", "ingest_run"]
