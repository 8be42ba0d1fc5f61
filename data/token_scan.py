"""What a scan of the parts' token arrays reads (the token filter's and the drifting-tokens board's): the
files of ``parts/`` that hold a step's rows, and the list fields a per-token metric is computed from."""

from __future__ import annotations

from data.store import RunStore
from data.token_frames import METRIC_FIELDS


def token_metric_fields(metric: str) -> tuple[str, ...]:
    """The list fields of a response the filter reads for ``metric`` (beside ``response_tokens``)."""
    return METRIC_FIELDS.get(metric, ())


def part_files(store: RunStore, step: int | None) -> tuple[list[str], list[int] | None]:
    """The files of ``parts/`` that hold the rows of ``step`` (of every step for None), and the parts to keep
    of them where some files hold rows of parts dropped since (else None), as
    :meth:`data.store.part_scans.PartScans.scan_parts` reads them."""
    steps = None if step is None else (step, step)
    ids = store.part_ids() if step is None else [p for s in store.index().select(step, step) for p in s.parts]
    entries = store.manifest.parts
    files = dict.fromkeys(
        str(f) for i in ids if entries[str(i)]["rows"] for f in store.part_files_of(i, steps)
    )
    keep = ids if (step is not None or store.shares_files()) else None
    return list(files), keep
