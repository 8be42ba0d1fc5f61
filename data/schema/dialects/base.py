"""What every dialect shares: :class:`Dialect` itself, how a run's files are read beyond their dialect
(:class:`Reading`), alias tables, and the step and split a file's path gives. The dialect modules import
this module, never the package, so that :mod:`data.schema.dialects` only registers them."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import polars as pl

from data import untrusted
from data.schema.contract import INT64_MAX

# How sure a dialect's ``recognise`` must be for its match to count as sure: a dialect scores this much only
# on fields or a layout unique to it. Less (names any logger may use: prompt, completion, input, output) is
# a guess, and every page of the run says so.
SURE = 25
# A key a dialect's ``line`` may set on a record: notes about that line (a list of texts), kept with it as
# data-quality notes (a mapped optional field that the line lacks).
LINE_NOTES = "__line_notes"


# rlboard.toml's [fields] (see data.schema.dialects.mapping): the names it maps and the step's two words.
NAMES = ("prompt", "response", "reward", "step", "group")
FOLDER, FILE = "folder", "file"


@dataclass(frozen=True)
class FieldMap:
    """A ``[fields]`` table that can be used: ``given`` the names and paths as written (those that could be
    used), ``where`` the rlboard.toml it came from (``"run"``: the run folder's, ``"root"``: the rollout
    root's, which applies only to files no dialect reads as sure)."""

    given: tuple[tuple[str, str], ...]
    where: str = "run"

    def key(self) -> list:
        return [list(map(list, self.given)), self.where]

    @property
    def table(self) -> dict[str, str]:
        return dict(self.given)

    @property
    def step_kind(self) -> str | None:
        """``"folder"``, ``"file"``, ``"regex"``, ``"path"`` (a field) or None (not named)."""
        step = self.table.get("step")
        if step is None:
            return None
        if step in (FOLDER, FILE):
            return step
        return "regex" if "(" in step else "path"


@dataclass(frozen=True)
class RunFiles:
    """What a dialect may read of a run's other files while its rollout files are read, every read bounded
    by ingest's read limits and kept for the rest of the read (see :mod:`data.ingest.companions`): ``read``
    a file's bytes by its path inside the run (decompressed where it ends in ``.zst``; None where there is no
    such file or it cannot be read within the limits), ``listdir`` the files under a folder of the run
    (their paths inside the run, sorted; none where there is no folder), ``size`` a file's size."""

    read: Callable[[str], bytes | None]
    listdir: Callable[[str], list[str]]
    size: Callable[[str], int | None]  # a file's size (None: no such file), without reading it


@dataclass(frozen=True)
class Companion:
    """What a dialect's rollout file has beside it that adds fields to its rows: miles' per-token Parquet
    beside its trajectory lines, prime-rl's annotation streams beside its trace stream.

    ``path``: the companion of a rollout file (its path inside the run to the companion's, a file or a
    folder; None for none); ``key``: the record field that names a row in it; ``what``: what it holds and
    why a row of it may have no line, as the runs page says it. A Parquet file's rows are ``table(frame)``;
    a companion of several files has its rows for a rollout file gathered by ``gather(files, rel)``, and
    whether they changed told by ``signature(files, rel)`` (a JSON value; without it, the companion file's
    size and time). Either way the rows are a dict key -> the fields the row adds. Ingest reads them each
    time the rollout file is read, and reads the rollout file again from its start when its companion's
    signature changed; the dialect's ``line`` takes a record's fields with ``reading.joined.take(key)``.
    ``stamp(files, rel)``: a cheap value (sizes, no reading) that changes whenever the signature may; where it
    is as last recorded, the signature is not computed (a run's every look at its files stays cheap)."""

    path: Callable[[str], str | None]
    key: str
    what: str
    table: Callable[[pl.DataFrame], dict] | None = None
    gather: Callable[[RunFiles, str], dict] | None = None
    signature: Callable[[RunFiles, str], object] | None = None
    stamp: Callable[[RunFiles, str], object] | None = None


@dataclass
class Joined:
    """A companion's rows as ingest read them for one rollout file (``file``: the companion's path inside
    the run; ``rows``: key -> fields), the keys its lines took (``used``) and looked up (``asked``)."""

    file: str
    rows: dict
    used: set = field(default_factory=set)
    asked: set = field(default_factory=set)  # every key looked up, found or not

    def take(self, key) -> dict | None:
        """The fields the companion holds for ``key`` (None: it has no row of that key)."""
        try:
            got = self.rows.get(key)
            self.asked.add(key)
        except TypeError:  # a key of a type no dict holds (a list): no row
            return None
        if got is not None:
            self.used.add(key)
        return got


@dataclass
class Reading:
    """How a run's files are read beyond their dialect: the reward functions' weights (a setting,
    rlboard.toml, or fitted to the reward the trainer logged) and names (the trainer's own log, such as TRL's log history), and, filled in while
    reading, how the reward was formed (``formed``: ``{"reward": "1 × a + 0.5 × b", "weights": "…"}``)."""

    reward_weights: dict[str, float] | None = None
    weights_from: str = ""
    reward_parts: tuple[str, ...] | None = None
    parts_from: str = ""
    formed: dict = field(default_factory=dict)
    tokenizer: str | None = None  # a local tokenizer.json naming token ids (see token_names)
    fields: FieldMap | None = None  # a [fields] mapping of rlboard.toml (see data.schema.dialects.mapping)
    # The companions read for this run's files (rollout file -> Joined; see Companion), and the one of the
    # file being read (set on the copy for_file gives).
    companions: dict[str, Joined] = field(default_factory=dict)
    joined: Joined | None = None
    run_files: object = None  # the run's other files as companions read them (data.ingest.companions)
    _per_file: dict[str, Reading] = field(default_factory=dict)

    def for_file(self, rel: str) -> Reading:
        """This reading for the lines of the rollout file ``rel``: with its companion's rows as ``joined``
        where it has one (one copy a file, sharing everything else), else this reading itself."""
        if rel not in self.companions:
            return self
        if rel not in self._per_file:
            self._per_file[rel] = replace(self, joined=self.companions[rel], _per_file={})
        return self._per_file[rel]

    def key(self) -> list:
        """What the store depends on (a store read with other weights or another mapping is read again)."""
        mapped = None if self.fields is None else self.fields.key()
        return [
            sorted((self.reward_weights or {}).items()),
            list(self.reward_parts or ()),
            self.tokenizer,
            mapped,
        ]

    def token_names(self, ids: list) -> list[str]:
        """Token ids as the tokens they stand for, by the tokenizer (``id_to_token``; an id it does not
        know stays its number); without a tokenizer, the ids as text."""
        tok = _tokenizer(self.tokenizer) if self.tokenizer else None
        if tok is None:
            return [str(i) for i in ids]
        return [(tok.id_to_token(i) if isinstance(i, int) and i >= 0 else None) or str(i) for i in ids]

    def decode(self, ids: list) -> str | None:
        """Token ids as the text they decode to (special tokens kept) by the local tokenizer; None
        without one, or for ids it cannot decode."""
        tok = _tokenizer(self.tokenizer) if self.tokenizer else None
        if tok is None or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            return None
        try:
            return tok.decode(ids, skip_special_tokens=False)
        except Exception:  # noqa: BLE001 - an id past its vocabulary: the ids are shown instead
            return None


_TOKENIZERS: dict[str, tuple[object, str | None]] = {}  # path -> (tokenizer or None, why not)


def tokenizer_problem(path: str) -> str | None:
    """Why the local tokenizer.json at ``path`` cannot be used (read once per process), or None when it
    can: said on the runs page, the token ids shown instead."""
    _tokenizer(path)
    return _TOKENIZERS[path][1]


def _tokenizer(path: str):
    """The tokenizer of a local tokenizer.json (read once per process; None when it cannot be read)."""
    if path not in _TOKENIZERS:
        try:
            from tokenizers import Tokenizer

            size = os.stat(path).st_size
            if size > untrusted.TOKENIZER_BYTES:
                raise ValueError(f"{size:,} bytes, over the limit of {untrusted.TOKENIZER_BYTES:,}")
            _TOKENIZERS[path] = (Tokenizer.from_file(path), None)
        except Exception as e:  # noqa: BLE001 - no tokenizer: the ids are shown (the runs page says why)
            _TOKENIZERS[path] = (None, f"{type(e).__name__}: {str(e)[:200]}")
    return _TOKENIZERS[path][0]


@dataclass(frozen=True)
class Dialect:
    """One trainer's way of writing rollouts.

    ``aliases``: the contract's fields under this dialect's names (a known field's other names are tried
    only when the contract's own is absent, the first present in the order given). ``line``: a parsed
    record rewritten onto the contract's fields before they are checked (prompt and response may be chat
    messages, see :mod:`data.schema.chat`); ``frame``: the same for a chunk Polars parsed whole, or None
    when only ``line`` can do it (the chunk then goes line by line). ``recognise(path, fields)``: how sure
    it is that a file (its path inside the run, the fields of its first record) is of this dialect, 0 for
    not at all (:data:`SURE` and more only on what is unique to it). ``stepless``: its files are evaluation
    dumps with no step (step 0, said on the runs page). ``rows``: for a dialect whose line holds several
    responses (Atropos' scored group), the line's records, one per response, each then mapped by ``line``
    (raises :class:`BadLine` for a line that is no such record); ingest numbers them within their line and
    takes the line as their group. ``mapping``: how fields were mapped, a phrase each, for the runs page.
    ``fields``: the same as an rlboard.toml ``[fields]`` table would say it (prompt, response, reward, step,
    group: dotted paths, ``"folder"``, ``"file"``), shown on the runs page as a mapping to copy and edit;
    empty where the dialect does more than a mapping can (chat turns, batches). ``companion``: a file beside
    each rollout file whose rows add fields to its lines (see :class:`Companion`). ``own_steps``: whether a
    file's lines carry their own step whatever its path says (prime-rl's trace stream: a chunk's number is
    no step); its lines without one are then bad lines that say so.
    """

    name: str
    title: str
    description: str
    recognise: Callable[[str, frozenset[str]], int]
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    mapping: tuple[str, ...] = ()
    line: Callable[[dict, Reading], dict] | None = None
    frame: Callable[[pl.DataFrame, Reading], pl.DataFrame] | None = None
    stepless: bool = False
    fields: dict[str, str] = field(default_factory=dict)
    rows: Callable[[dict], list[dict]] | None = None
    companion: Companion | None = None
    own_steps: Callable[[str], bool] | None = None

    def renames(self, columns) -> dict[str, str]:
        """Which columns stand for a known field under this dialect's name (see ``aliases``)."""
        renames = {}
        for canon, alts in self.aliases.items():
            if canon not in columns:
                for alt in alts:
                    if alt in columns:
                        renames[alt] = canon
                        break
        return renames

    def apply_aliases(self, obj: dict) -> dict:
        """A parsed record with its fields under this dialect's names moved to the known names."""
        for alt, canon in self.renames(obj).items():
            obj[canon] = obj.pop(alt)
        return obj


def merge_aliases(*tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Alias tables joined, the names of the first table first for each field."""
    out: dict[str, tuple[str, ...]] = {}
    for table in tables:
        for canon, names in table.items():
            out[canon] = tuple(dict.fromkeys((*out.get(canon, ()), *names)))
    return out


# A step in a file's or folder's name: "step" and its number (`step_120`, `global_step-5`, NeMo-RL's
# `train_data_step12`), not after a letter (`substep3` is not one); or a name that is only a number
# (veRL's rollout_data_dir writes `120.jsonl`).
_NAME_STEP = re.compile(r"(?<![a-z])step[_=-]?(\d+)(?!.*(?<![a-z])step[_=-]?\d)|^(\d+)$", re.IGNORECASE)
_STEP_WORD = re.compile(r"(?<![a-z])step[_=-]?(\d+)(?!.*(?<![a-z])step[_=-]?\d)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+")
ROLLOUT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet")


def base_name(name: str) -> str:
    """A rollout file's name without its suffix (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``, ``.parquet``)."""
    for suffix in ROLLOUT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def step_from_name(name: str) -> int | None:
    """The step that a rollout file's or folder's name gives, for its lines that have none; None when the
    name gives none (``rank0.jsonl``) or one out of range. With "step" twice, the last one counts."""
    m = _NAME_STEP.search(base_name(name))
    if m is None:
        return None
    step = int(m.group(1) or m.group(2))
    return step if step <= INT64_MAX else None


def step_from_path(rel: str) -> int | None:
    """The step of a file's lines that have none, from its path inside the run, read only where the path
    is laid out as a known trainer lays out its steps (else None: the caller reads the file as step 0 and
    says so). In this order:

    1. "step" and a number in the file's name (NeMo-RL's ``train_data_step3.jsonl``, ``step_12.jsonl``);
    2. a parent folder that is only a number: that folder is the step and the file's name is something
       else (AReaL's ``rollout/{version}/{task_id}.jsonl``: ``rollout/0/13.jsonl`` is step 0, task 13);
    3. "step" and a number in a folder's name, the innermost first (prime-rl's ``rollouts/step_12/…``);
    4. a file name that is only a number, in a folder that is not (veRL's flat ``{step}.jsonl``).
    """
    *folders, name = rel.split("/")
    name = base_name(name)
    if (m := _STEP_WORD.search(name)) is not None:
        return _in_range(m.group(1))
    if folders and _NUMBER.fullmatch(folders[-1]):
        return _in_range(folders[-1])
    for folder in reversed(folders):
        if (m := _STEP_WORD.search(folder)) is not None:
            return _in_range(m.group(1))
    return _in_range(name) if _NUMBER.fullmatch(name) else None


def _in_range(digits: str) -> int | None:
    step = int(digits)
    return step if step <= INT64_MAX else None


# Validation and evaluation dumps written beside the training ones: NeMo-RL's val_data_step{N}.jsonl,
# prime-rl's eval_rollouts.jsonl and rollouts/step_{n}/eval/, veRL's validation_data_dir (a folder the user
# names, usually "val…" or "validation…").
_VALIDATION = re.compile(r"^(val|valid|validation|eval|evals|evaluation)(?:[_\-.]|\d|$)", re.IGNORECASE)
TRAIN, VALIDATION = "train", "validation"


def split_of(rel: str) -> str:
    """``"validation"`` for a file whose name or folder (inside the run) says it holds validation or
    evaluation rollouts, else ``"train"``: the two are kept apart (a run each), never merged by step."""
    return VALIDATION if any(_VALIDATION.match(part) for part in rel.split("/")) else TRAIN
