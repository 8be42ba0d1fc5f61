"""Trainer-side writer: append one step's rollouts to a run folder in this board's contract.

For trainers that dump no rollouts (OpenRLHF, custom loops). Standard library only, so this one file can be
copied into a training code base as it is. Each call appends the step's lines to ``rank{rank}.jsonl`` in one
``write`` on a file opened for appending: the board takes only complete lines, so a reader never sees half
a step's line, and ranks never write into the same file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["write_rollouts"]


def _plain(value):
    """A value as JSON takes it: tensors and arrays as lists (``.tolist()``), numpy scalars as numbers."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    elif hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _rank() -> int:
    for name in ("RANK", "LOCAL_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def write_rollouts(
    run_dir: str | os.PathLike,
    step: int,
    prompts: Sequence[str],
    responses: Sequence[str],
    rewards: Sequence[float],
    *,
    rank: int | None = None,
    **columns,
) -> Path:
    """Append one line per response of training step ``step`` to ``run_dir/rank{rank}.jsonl``.

    ``prompts``, ``responses``, ``rewards``: one per response. ``columns``: more fields, each one value per
    response: the contract's token arrays (``response_tokens``, ``logprobs``, ``ref_logprobs``, ``values``,
    ``token_rewards``), ``ref_response`` / ``ref_reward``, or any scalar of your own (``group_id``,
    ``advantage``); tensors and numpy arrays are written as lists. ``rank``: the data-parallel rank
    (default: ``$RANK``, else 0). Returns the file written.
    """
    n = len(prompts)
    given = {"prompt": prompts, "response": responses, "reward": rewards, **columns}
    for name, values in given.items():
        if len(values) != n:
            arg = {"response": "responses", "reward": "rewards"}.get(name, name)
            raise ValueError(f"{arg}: {len(values)} values for {n} prompts")
    lines = []
    for i in range(n):
        record = {"step": int(step)}
        for name, values in given.items():
            record[name] = _plain(values[i])  # NaN / Infinity are written as the literals the board reads
        lines.append(json.dumps(record, ensure_ascii=False))
    path = Path(run_dir) / f"rank{_rank() if rank is None else int(rank)}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(payload)
        while view:  # one write in practice; a short write (a full disk, a signal) goes on where it stopped
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return path
