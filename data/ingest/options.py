"""How a run is read, beyond what its files say: the run folder's optional ``rlboard.toml`` (its dialect,
its reward functions' weights), the settings, and the trainer's own log of its reward functions' names
(TRL's log history). Read at every ingest; a change makes the store read the run again."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from data import schema, untrusted
from data.config import MAX_REWARD_WEIGHT
from data.remote import RemotePath, as_path
from data.schema.dialects.base import tokenizer_problem
from data.schema.dialects.mapping import FieldMap, parse_fields

RUN_FILE = "rlboard.toml"
ROOT_FILE = "rlboard.toml at the rollout root"  # its [fields] for every run no dialect reads as sure
# Where TRL's Trainer keeps its log history: trainer_state.json in each checkpoint, or log_history.json
# saved beside the completions by hand.
TRL_LOGS = ("log_history.json", "trainer_state.json")
TRL_REWARD_KEY = "rewards/"  # rewards/{function}/mean
# How closely weights fitted to TRL's log must reproduce its logged reward (relative to its largest value):
# the log holds float32 means (the agreement check sees differences of ~5e-7).
FIT_TOLERANCE = 1e-4


@dataclass
class RunOptions:
    """A run's reading options: ``dialect`` named by its rlboard.toml (wins), ``default`` by the setting
    (where the guess is not sure), ``reading`` (weights and names of reward functions) and ``problems``
    (an rlboard.toml that could not be used, said on the runs page)."""

    dialect: str | None = None
    default: str | None = None
    reading: schema.Reading = field(default_factory=schema.Reading)
    problems: list[str] = field(default_factory=list)

    def key(self) -> list:
        """What the store depends on: a store read with other options is read again."""
        return [self.dialect, self.default, *self.reading.key()]

    @property
    def fields(self) -> FieldMap | None:
        """The [fields] mapping the run is read with (its own rlboard.toml's, else the root's), or None."""
        return self.reading.fields


def _weights(value, where: str, problems: list[str]) -> dict[str, float] | None:
    if not isinstance(value, dict):
        problems.append(f"{where}: reward_weights is not a table of name = weight")
        return None
    out = {}
    for name, w in value.items():
        if isinstance(w, bool) or not isinstance(w, int | float):
            problems.append(f"{where}: the weight of {name!r} is not a number")
        elif not math.isfinite(float(w)) or abs(float(w)) > MAX_REWARD_WEIGHT:
            problems.append(
                f"{where}: the weight of {name!r} is {w}, not a finite number within ±{MAX_REWARD_WEIGHT:g}"
            )
        else:
            out[str(name)] = float(w)
    return out or None


def fit_reward_weights(history: list, names: tuple[str, ...]) -> tuple[dict[str, float], int, float] | None:
    """The weights of TRL's reward functions that its log history implies, or None where it does not pin
    them down: ``(weights, steps used, largest difference)``.

    TRL logs the step's mean of the weighted sum as ``reward`` beside each function's mean,
    ``rewards/{name}/mean``; so ``reward = Σ wᵢ · meanᵢ`` at every logged step. The weights are the least-
    squares solution over the steps with every value finite, rounded to 6 decimals (weights are set by
    hand: 1.0, 0.5), taken only when there are more such steps than weights, the means are independent,
    every weight is within ±MAX_REWARD_WEIGHT (as a setting's is), and the rounded weights reproduce
    every logged reward to :data:`FIT_TOLERANCE` (a function that returned None for some responses breaks
    the identity: TRL sums with ``nansum``)."""
    rows, ys = [], []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        values = [entry.get("reward"), *(entry.get(f"{TRL_REWARD_KEY}{n}/mean") for n in names)]
        if all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            ys.append(float(values[0]))
            rows.append([float(v) for v in values[1:]])
    if not names or len(rows) <= len(names):
        return None
    x, y = np.array(rows), np.array(ys)
    if np.linalg.matrix_rank(x) < len(names):
        return None
    w = np.round(np.linalg.lstsq(x, y, rcond=None)[0], 6)
    if not np.all(np.abs(w) <= MAX_REWARD_WEIGHT):  # means near 0 fit any weight: no weight, as a setting's
        return None
    worst = float(np.max(np.abs(x @ w - y)))
    if worst > FIT_TOLERANCE * max(1.0, float(np.max(np.abs(y)))):
        return None
    return {n: float(v) + 0.0 for n, v in zip(names, w, strict=True)}, len(rows), worst


def _trl_reward_names(run_dir: Path) -> tuple[tuple[str, ...], str, tuple | None] | None:
    """The reward functions TRL logged (``rewards/{name}/mean`` in its log history), from the newest of
    the run's log files (the folder and its checkpoints, two levels deep), where they come from, and the
    weights that log implies (:func:`fit_reward_weights`)."""
    found = []
    for pattern in TRL_LOGS:
        for depth in ("", "*/"):
            found.extend(run_dir.glob(depth + pattern))
    for path in sorted(found, key=_mtime, reverse=True):
        try:
            # A log linked out of the run folder, a FIFO or a device named like one is not read.
            data = orjson.loads(untrusted.read_bounded(path, untrusted.LOG_BYTES, root=run_dir))
        except (OSError, orjson.JSONDecodeError, untrusted.Refused):
            continue
        history = data.get("log_history") if isinstance(data, dict) else data
        names: dict[str, None] = {}
        for entry in history if isinstance(history, list) else ():
            for key in entry if isinstance(entry, dict) else ():
                if key.startswith(TRL_REWARD_KEY) and key.endswith("/mean"):
                    names[key[len(TRL_REWARD_KEY) : -len("/mean")]] = None
        if names:
            rel = path.relative_to(run_dir).as_posix()
            fitted = fit_reward_weights(history, tuple(names))
            return tuple(names), f"TRL's log history ({rel})", fitted and (*fitted, rel)
    return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _tokenizer_path(run_dir: Path, given, where: str, problems: list[str], inside: bool) -> str | None:
    """A tokenizer.json that can be read (one named by rlboard.toml must lie in the run folder: the board
    reads only the rollout root), as an absolute path; None (and a problem) otherwise."""
    path = Path(given)
    if inside and isinstance(run_dir, RemotePath):
        problems.append(
            f"{where}: tokenizer {str(given)!r} lies on an object store; give a local copy with RLBOARD_TOKENIZER"
        )
        return None
    if inside:
        ok, why = untrusted.inside(run_dir / path, run_dir)
        if not ok and why.startswith("a link out"):
            problems.append(f"{where}: tokenizer {str(given)!r} is not in the run folder")
            return None
        if not ok and (run_dir / path).is_symlink():
            problems.append(f"{where}: tokenizer {str(given)!r} is not read: it is {why}")
            return None
        path = untrusted.real_path(run_dir / path)[0] or run_dir / path
    if not path.is_file():
        problems.append(f"{where}: tokenizer {str(given)!r} is not a file; token ids are shown")
        return None
    if (why := tokenizer_problem(str(path))) is not None:
        problems.append(f"{where}: tokenizer {str(given)!r} cannot be read ({why}); token ids are shown")
        return None
    return str(path)


def _run_file(run_dir: Path, problems: list[str], label: str = RUN_FILE) -> tuple[dict, bytes | None]:
    """The rlboard.toml of a folder (the run's, or the rollout root's: ``label`` says which) as ``(table,
    its bytes)``: ``({}, None)`` where there is none, and ``({}, bytes)`` (with the problem said) where it
    cannot be used: not a regular file of the folder, over :data:`untrusted.SETTINGS_BYTES`, nested too
    deep, not TOML."""
    path = run_dir / RUN_FILE
    try:
        text = untrusted.read_bounded(
            path, untrusted.SETTINGS_BYTES, root=None if _remote(run_dir) else run_dir, what=RUN_FILE
        )
        untrusted.check_depth(text, RUN_FILE)
    except FileNotFoundError:
        return {}, None
    except untrusted.Refused as e:
        problems.append(f"{label}: not read: {e}")
        return {}, b""
    except OSError as e:
        if not _exists(path):
            return {}, None
        problems.append(f"{label}: not read ({e.strerror or e})")
        return {}, b""
    try:
        return tomllib.loads(text.decode("utf-8", errors="replace")), text
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        problems.append(f"{label}: not TOML ({e})")
        return {}, text


def _field_map(run_dir: Path, root: Path | None, conf: dict, problems: list[str]) -> FieldMap | None:
    """The [fields] mapping of the run: its own rlboard.toml's (which replaces the root's), else the rollout
    root's, whose other settings are not read (none when the root is not given or is the run folder)."""
    if "fields" in conf:
        return parse_fields(conf["fields"], "run", problems, RUN_FILE)
    if root is None or str(root) == str(run_dir):
        return None
    root_conf, text = _run_file(root, problems, ROOT_FILE)
    if text is None or "fields" not in root_conf:
        return None
    return parse_fields(root_conf["fields"], "root", problems, ROOT_FILE)


def _remote(path: Path) -> bool:
    return isinstance(path, RemotePath)


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return True


def load_options(
    run_dir: Path,
    dialect: str | None = None,
    reward_weights: tuple[tuple[str, float], ...] | None = None,
    tokenizer: Path | None = None,
    root: Path | None = None,
) -> RunOptions:
    """The reading options of ``run_dir``: its ``rlboard.toml``, else the settings (``dialect``,
    ``reward_weights``, ``tokenizer``), and the ``[fields]`` of the rollout ``root``'s rlboard.toml where
    the run's own has none; never raises for a file it cannot use (the problem is kept)."""
    opts = RunOptions(default=dialect if dialect in schema.dialects_by_name() else None)
    if dialect and opts.default is None:
        opts.problems.append(f"setting RLBOARD_DIALECT={dialect!r} names no dialect")
    weights, weights_from = (
        (dict(reward_weights), "the setting RLBOARD_REWARD_WEIGHTS") if reward_weights else (None, "")
    )
    conf, text = _run_file(as_path(run_dir), opts.problems)
    if text is not None:
        named = conf.get("dialect")
        if isinstance(named, str) and named in schema.dialects_by_name():
            opts.dialect = named
        elif named is not None:
            names = ", ".join(schema.dialects_by_name())
            opts.problems.append(f"{RUN_FILE}: dialect {named!r} is not one of {names}")
        if "reward_weights" in conf:
            given = _weights(conf["reward_weights"], RUN_FILE, opts.problems)
            if given:
                weights, weights_from = given, RUN_FILE
    opts.reading = schema.Reading(reward_weights=weights, weights_from=weights_from)
    opts.reading.fields = _field_map(
        as_path(run_dir), None if root is None else as_path(root), conf, opts.problems
    )
    if isinstance(conf.get("tokenizer"), str):
        opts.reading.tokenizer = _tokenizer_path(
            as_path(run_dir), conf["tokenizer"], RUN_FILE, opts.problems, True
        )
    elif tokenizer is not None:
        opts.reading.tokenizer = _tokenizer_path(
            as_path(run_dir), tokenizer, "RLBOARD_TOKENIZER", opts.problems, False
        )
    trl = _trl_reward_names(as_path(run_dir))
    if trl is not None:
        opts.reading.reward_parts, opts.reading.parts_from, fitted = trl
        if opts.reading.reward_weights is None and fitted is not None:
            fit, steps, worst, rel = fitted
            opts.reading.reward_weights = fit
            opts.reading.weights_from = (
                f"fitted to the reward TRL logged ({rel}: {steps} steps, largest difference {worst:.1g})"
            )
    return opts
