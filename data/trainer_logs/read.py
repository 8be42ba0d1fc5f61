"""Reading one trainer log into long rows ``key, step, value``: a Hugging Face / TRL log history (a JSON
list of logged dicts, or ``trainer_state.json`` holding one) and TensorBoard event files (scalars only,
read as a stream: :mod:`data.trainer_logs.events`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from data import untrusted

# The keys of the Trainer's last log, written once at the end of training (``Trainer.train`` logs
# ``train_runtime``, ``train_samples_per_second``, ``train_steps_per_second``, ``total_flos`` and
# ``train_loss`` with the last ``epoch`` and ``step``): a run-level summary, not a point of a curve.
SUMMARY_KEYS = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"}
)
# Keys that locate a log entry rather than measure anything.
STEP_KEY = "step"
# A step beyond this is no training step (2^62: steps are int64 wherever they are compared or aligned).
MAX_STEP = 1 << 62


@dataclass
class Rows:
    """What one log gave: ``keys``, ``steps``, ``values`` (parallel lists) or, for TensorBoard's many
    points, ``frame`` (``key, step, value``: no Python object a point), the final summary, and notes on what
    was left out (entries without a step, values that are not numbers)."""

    keys: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    frame: pl.DataFrame | None = None

    def add(self, key: str, step: int, value: float) -> None:
        self.keys.append(key)
        self.steps.append(step)
        self.values.append(value)


def _number(v) -> float | None:
    """A logged value as a float: ints and floats (NaN / infinities kept), not bools, strings or lists."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def history_entries(data) -> list | None:
    """The list of logged dicts of a parsed JSON file: the file itself when it is a list, else its
    ``log_history`` (``trainer_state.json``); None for anything else."""
    if isinstance(data, dict):
        data = data.get("log_history")
    return data if isinstance(data, list) else None


def read_history(path: Path, rel: str) -> Rows:
    """Rows of a log history file. Each entry is one ``Trainer.log`` call: every numeric key at the entry's
    ``step`` (the global optimizer step); the final summary entry (any key of :data:`SUMMARY_KEYS`) goes to
    ``summary`` instead. Entries without an integer ``step`` and non-numeric values are counted in a note.
    ``NaN`` / ``Infinity`` (Python's json writes them) are read as such."""
    out = Rows()
    try:
        raw = untrusted.read_bounded(Path(path), untrusted.LOG_BYTES, what=rel)
        untrusted.check_depth(raw, rel)
        data = json.loads(raw)
    except untrusted.Refused as e:
        out.notes.append(f"{rel}: not read ({e}).")
        return out
    except (OSError, ValueError, RecursionError) as e:
        out.notes.append(f"{rel}: not read ({type(e).__name__}: {e}).")
        return out
    entries = history_entries(data)
    if entries is None:
        out.notes.append(f"{rel}: not a log history (expected a list of logged dicts, or a trainer state).")
        return out
    no_step = skipped = 0
    for entry in entries:
        if not isinstance(entry, dict):
            no_step += 1
            continue
        step = entry.get(STEP_KEY)
        if isinstance(step, bool) or not isinstance(step, int) or not -MAX_STEP <= step <= MAX_STEP:
            no_step += 1
            continue
        if SUMMARY_KEYS & entry.keys():
            for k, v in entry.items():
                x = _number(v)
                if x is not None and k != STEP_KEY:
                    out.summary[k] = x
            continue
        for k, v in entry.items():
            if k == STEP_KEY:
                continue
            x = _number(v)
            if x is None:
                skipped += 1
                continue
            out.add(k, step, x)
    if no_step:
        out.notes.append(
            f"{rel}: {no_step} entries without an integer step (or one beyond ±2^62) were left out."
        )
    if skipped:
        out.notes.append(f"{rel}: {skipped} values that are not numbers were left out.")
    return out


def read_events(folder: Path, rel: str, names: list[str] | None = None) -> Rows:
    """Scalar rows of the TensorBoard event files ``names`` of ``folder`` (by default every
    ``events.out.tfevents.*`` there, by name), read as a stream in bounded memory (see
    :func:`data.trainer_logs.events.read_scalars`: scalars only, at most ``ReadLimits.tensorboard_points``
    of them). Both ways of writing a scalar count: a legacy ``simple_value`` (``torch.utils.tensorboard``,
    tensorboardX, as the Hugging Face Trainer writes) and a TF2 scalar tensor. A key is the tag as written
    (the Trainer writes ``train/<name>``). The points are in ``frame``."""
    from data.trainer_logs.events import read_scalars

    if names is None:
        try:
            names = sorted(
                p.name for p in Path(folder).iterdir() if p.name.startswith("events.out.tfevents.")
            )
        except OSError as e:
            return Rows(notes=[f"{rel}: TensorBoard events not read ({type(e).__name__}: {e})."])
    got = read_scalars(Path(folder), rel, names)
    frames = [
        pl.DataFrame(
            {"step": np.frombuffer(steps, dtype=np.int64), "value": np.frombuffer(values, dtype=np.float64)}
        ).select(pl.lit(tag).alias("key"), "step", "value")
        for tag, (steps, values) in sorted(got.tags.items())
    ]
    return Rows(notes=got.notes, frame=pl.concat(frames) if frames else None)


def finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None
