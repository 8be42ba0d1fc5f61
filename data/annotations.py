"""Annotations (issue 38): labels and notes on a response or a span of its tokens, shared by the team.

Each run's annotations are one append-only JSON-lines file under the cache folder but outside every store
(``<cache>/annotations/<slug>-<hash>.jsonl``), so a store rebuilt for a new format or after a deleted cache
keeps them. One line per change, keyed by the response's stable ``sample_id`` and its token span (None: the
whole response); the latest line of a key wins, and a line whose ``label`` is null removes it. Writers
(gunicorn workers are processes) append one ``write()`` per line under an exclusive ``flock``, so no line is
ever torn or lost; a reader skips a malformed line and counts it. On an object-storage cache
(``--cache-dir s3://…``) each line is an object of its own instead, written only if absent
(:mod:`data.annotations_remote`).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import threading
import time
import tomllib
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from data import untrusted

FOLDER = "annotations"
DEFAULT_LABELS = ("reward hack", "truncated", "repetition", "good")
MAX_NOTE_BYTES = 8 * 1024  # a note, in UTF-8
MAX_LABEL_CHARS = 64
MAX_LABELS = 32  # in a label set of rlboard.toml
MAX_USER_CHARS = 128
MAX_SAMPLE_CHARS = 256
MAX_POSITION = 1 << 24  # a token position (a response of 16M tokens is no response)
# A line: the note and the other fields, JSON-escaped (a control character takes 6 bytes): never more.
MAX_LINE_BYTES = 64 * 1024
ANONYMOUS = "anonymous"
RATE_WINDOW = 60.0  # seconds over which a user's writes are counted


class AnnotationError(ValueError):
    """A write refused: the message says why, in words a user reads beside the control."""


@dataclass(frozen=True)
class Annotation:
    """One annotation as it stands (the latest line of its key). ``span``: ``(first, last)`` token positions,
    both included, or None for the whole response; ``when``: ISO 8601, UTC."""

    sample_id: str
    span: tuple[int, int] | None
    label: str
    note: str
    who: str
    when: str

    def span_text(self) -> str:
        return "whole response" if self.span is None else f"tokens {self.span[0]}–{self.span[1]}"


@dataclass(frozen=True)
class Annotated:
    """A run's annotations as they stand, in the order they were last changed, and the lines skipped."""

    items: tuple[Annotation, ...] = ()
    skipped: int = 0
    # Why the annotations could not be read just now (an object store that did not answer), or None.
    problem: str | None = None
    # Read from an object store's objects (one per line), not a file: said so by the notice.
    objects: bool = False

    def of(self, sample_id: str) -> list[Annotation]:
        return [a for a in self.items if a.sample_id == sample_id]

    def samples_with(self, label: str) -> tuple[str, ...]:
        """The sample ids holding ``label`` (on the whole response or a span), sorted."""
        return tuple(sorted({a.sample_id for a in self.items if a.label == label}))

    def labels_by_sample(self) -> dict[str, str]:
        """``sample_id -> "label, label"`` (each label once, in the order first given)."""
        out: dict[str, list[str]] = {}
        for a in self.items:
            got = out.setdefault(a.sample_id, [])
            if a.label not in got:
                got.append(a.label)
        return {k: ", ".join(v) for k, v in out.items()}

    def notice(self) -> str | None:
        """What a page says of the lines it could not read, or None."""
        said = [self.problem] if self.problem else []
        if self.skipped:
            what = (
                "object(s) of this run's annotations on the object store"
                if self.objects
                else "line(s) of this run's annotations file"
            )
            said.append(f"{self.skipped:,} {what} could not be read and were skipped.")
        return " ".join(said) or None


def file_for(cache_dir: Path, run: str) -> Path:
    """The annotations file of ``run`` (an untrusted name): a readable slug of it and a hash of all of it,
    so that no name reaches outside the folder or meets another run's file."""
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run)[:40].lstrip(".") or "run"
    digest = hashlib.blake2b(run.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return Path(cache_dir) / FOLDER / f"{slug}-{digest}.jsonl"


# ---- the label set -------------------------------------------------------------------------------------


def label_set(run_dir: Path | None, root: Path | None) -> tuple[tuple[str, ...], list[str]]:
    """``(labels, problems)``: the ``labels`` of ``[annotations]`` in the run folder's rlboard.toml, else in
    the rollout root's, else :data:`DEFAULT_LABELS`. Both files are untrusted: read bounded, each label a
    short one-line text, at most :data:`MAX_LABELS`; a file that cannot be used is said in ``problems``."""
    problems: list[str] = []
    for folder in (run_dir, root):
        if folder is None:
            continue
        labels = _labels_in(folder, problems)
        if labels:
            return labels, problems
    return DEFAULT_LABELS, problems


def _labels_in(folder: Path, problems: list[str]) -> tuple[str, ...] | None:
    path = folder / "rlboard.toml"
    try:
        raw = untrusted.read_bounded(path, untrusted.SETTINGS_BYTES, what="rlboard.toml")
        untrusted.check_depth(raw, "rlboard.toml")
        conf = tomllib.loads(raw.decode("utf-8", errors="replace"))
    except FileNotFoundError:
        return None
    except (OSError, untrusted.Refused, tomllib.TOMLDecodeError, RecursionError) as e:
        problems.append(f"rlboard.toml: its annotation labels not read ({e})")
        return None
    section = conf.get("annotations")
    if not isinstance(section, dict) or "labels" not in section:
        return None
    given = section["labels"]
    if not isinstance(given, list) or not given:
        problems.append("rlboard.toml: [annotations] labels is not a list of texts; the default labels apply")
        return None
    kept = [g.strip() for g in given if isinstance(g, str) and _label_ok(g.strip())]
    if len(kept) < len(given) or len(kept) > MAX_LABELS:
        problems.append(
            f"rlboard.toml: [annotations] labels: kept {min(len(kept), MAX_LABELS)} of {len(given)} (each a "
            f"text of 1-{MAX_LABEL_CHARS} characters on one line, at most {MAX_LABELS})"
        )
    return tuple(dict.fromkeys(kept))[:MAX_LABELS] or None


def _label_ok(label: str) -> bool:
    return 0 < len(label) <= MAX_LABEL_CHARS and label.isprintable()


# ---- writing -------------------------------------------------------------------------------------------


def record(
    sample_id: str,
    label: str | None,
    labels: Iterable[str],
    note: str | None = None,
    who: str | None = None,
    span: tuple[int, int] | None = None,
    when: datetime | None = None,
) -> dict:
    """One line's fields, checked: ``label`` one of ``labels`` (None removes the key's annotation), the
    note at most :data:`MAX_NOTE_BYTES` in UTF-8, a span of two positions in order. Raises
    :class:`AnnotationError` with the reason."""
    if not isinstance(sample_id, str) or not 0 < len(sample_id) <= MAX_SAMPLE_CHARS:
        raise AnnotationError("Not saved: no response is selected.")
    if label is not None and label not in tuple(labels):
        raise AnnotationError(f"Not saved: {str(label)[:MAX_LABEL_CHARS]!r} is not one of this run's labels.")
    note = note or ""
    size = len(note.encode("utf-8", "surrogatepass"))
    if size > MAX_NOTE_BYTES:
        raise AnnotationError(
            f"Not saved: the note is {size:,} bytes, over the limit of {MAX_NOTE_BYTES:,} bytes "
            f"({MAX_NOTE_BYTES // 1024} KB); shorten it."
        )
    if span is not None:
        lo, hi = span
        if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi < MAX_POSITION):
            raise AnnotationError("Not saved: a token span is two positions, the first not after the last.")
        span = (lo, hi)
    who = (who or ANONYMOUS)[:MAX_USER_CHARS]
    stamp = (when or datetime.now(UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {
        "sample_id": sample_id,
        "span": list(span) if span else None,
        "label": label,
        "note": note,
        "who": who,
        "when": stamp,
    }


@contextmanager
def _locked(path: Path):
    """An exclusive ``flock`` on ``path`` (created), held for the block: every writer of every process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def append(path: Path, line: dict, max_bytes: int, rate: int | None = None, now: float | None = None) -> None:
    """Append ``line`` (see :func:`record`) to the annotations file ``path`` under its lock: one ``write()``
    with ``O_APPEND``. Refused (:class:`AnnotationError`) when the file would pass ``max_bytes``, or when its
    writer wrote ``rate`` annotations in the last minute (any run; None: no limit)."""
    data = _encoded(line)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent / ".lock"):
        if rate is not None:
            _take_turn(path.parent, line["who"], rate, time.time() if now is None else now)
        size = path.stat().st_size if path.exists() else 0
        if size + len(data) > max_bytes:
            raise AnnotationError(
                f"Not saved: this run's annotations file has reached its limit of {max_bytes:,} bytes "
                "(RLBOARD_ANNOTATION_FILE_BYTES)."
            )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):  # a full disk: the torn end is skipped by every reader
            raise AnnotationError("Not saved: the disk took only part of the annotation.")


def _take_turn(folder: Path, who: str, rate: int, now: float) -> None:
    """Count one write of ``who`` in its file of recent writes (``.rate/<hash>.json``: at most ``rate``
    times), refusing it when the last minute holds ``rate`` already. Called under the folder's lock."""
    path = (
        folder
        / ".rate"
        / (hashlib.blake2b(who.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest() + ".json")
    )
    try:
        times = [t for t in json.loads(path.read_bytes()[:65536]) if isinstance(t, float | int)]
    except (OSError, ValueError, TypeError):
        times = []
    times = [t for t in times if now - RATE_WINDOW < t <= now]
    if len(times) >= rate:
        wait = max(1, round(RATE_WINDOW - (now - min(times))))
        raise AnnotationError(
            f"Not saved: {who} wrote {rate} annotations in the last minute (RLBOARD_ANNOTATION_RATE); "
            f"try again in {wait} s."
        )
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([*times, now][-rate:]))
    os.replace(tmp, path)


# ---- reading -------------------------------------------------------------------------------------------


def read(path: Path, max_bytes: int) -> Annotated:
    """The annotations of the file ``path`` as they stand (none where there is no file). The file only
    grows, so each process reads only what was appended since its last look (a file replaced or cut is
    read again whole); a page's requests cost one ``stat`` while nothing changed."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Annotated()
    tail = _tail(str(path), st.st_dev, st.st_ino)
    return tail.advance(st.st_size, max_bytes)


class _Tail:
    """One file's state in this process: the offset read up to, the latest annotation of each key (None:
    removed) in the order of their last change, the lines skipped, and its snapshot."""

    def __init__(self, path: str):
        self.path, self.offset, self.skipped = path, 0, 0
        self.latest: dict[tuple, Annotation | None] = {}
        self.shown = Annotated()
        self.lock = threading.Lock()

    def advance(self, size: int, max_bytes: int) -> Annotated:
        with self.lock:
            if size < self.offset:  # cut or replaced in place: read again from the start
                self.offset, self.skipped, self.latest = 0, 0, {}
            # Bounded like every file the board reads: writers hold it under max_bytes (plus one line).
            limit = max_bytes + MAX_LINE_BYTES
            if size == self.offset or self.offset >= limit:
                return self.shown
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    raw = f.read(min(size, limit) - self.offset)
            except OSError:
                return self.shown
            # Only whole lines: a write seen half-done is read whole at the next look.
            whole = raw[: raw.rfind(b"\n") + 1]
            for line in whole.split(b"\n"):
                if not line.strip():
                    continue
                got = _parse(line)
                if got is None:
                    self.skipped += 1
                    continue
                key, ann = got
                self.latest.pop(key, None)  # re-inserted last: the dict keeps the order of the last changes
                self.latest[key] = ann
            self.offset += len(whole)
            self.shown = Annotated(tuple(a for a in self.latest.values() if a is not None), self.skipped)
            return self.shown


# A few files' states per process (a file of RLBOARD_ANNOTATION_FILE_BYTES, 32 MiB or ~100k lines, holds
# ~100 MB of objects at most); a file replaced by another (a new inode) is a new key.
@functools.lru_cache(maxsize=4)
def _tail(path: str, _dev: int, _inode: int) -> _Tail:
    return _Tail(path)


def _parse(line: bytes) -> tuple[tuple, Annotation | None] | None:
    """``(key, annotation or None for a removal)`` of one line, None for a line that is not one."""
    try:
        d = json.loads(line)
        sample, span, label = d["sample_id"], d.get("span"), d.get("label")
        if not isinstance(sample, str) or not (label is None or isinstance(label, str)):
            return None
        if span is not None:
            lo, hi = span
            if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
                return None
            span = (lo, hi)
        key = (sample, span)
        if label is None:
            return key, None
        note, who, when = (str(d.get(k) or "") for k in ("note", "who", "when"))
        return key, Annotation(
            sample, span, label, note[: MAX_NOTE_BYTES * 4], who[:MAX_USER_CHARS], when[:40]
        )
    except (ValueError, TypeError, KeyError, RecursionError):
        return None


def spans_of(annotated: Annotated, sample_id: str) -> list[dict]:
    """The token spans annotated on ``sample_id``: ``{"from", "to", "label"}`` each, for the strip."""
    return [{"from": a.span[0], "to": a.span[1], "label": a.label} for a in annotated.of(sample_id) if a.span]


# ---- a board's runs ------------------------------------------------------------------------------------


def of_run(settings, run: str) -> Annotated:
    """The annotations of ``run`` under the cache of ``settings`` (the board's): its local file, or on an
    object-storage cache its objects (:mod:`data.annotations_remote`)."""
    if settings.store_url is None:
        return read(file_for(settings.cache_dir, run), settings.annotation_file_bytes)
    from data import annotations_remote

    log, mark = _log(settings, run), annotations_remote.mark_of(_mark_file(settings, run))
    problem = None
    try:
        merged = log.look(settings.annotation_file_bytes, settings.refresh_seconds, mark=mark)
    except OSError as e:  # what was read before, and why it may be out of date
        merged = log.merged
        problem = f"The annotations on the object store could not be read just now ({e}); shown as last read."
    return Annotated(
        tuple(a for a in merged.latest.values() if a is not None), merged.skipped, problem, objects=True
    )


def _mark_file(settings, run: str) -> Path:
    """The run's write mark on this host (:func:`data.annotations_remote.mark_of`), in the working folder."""
    return file_for(settings.cache_dir, run).with_suffix(".written")


def _log(settings, run: str):
    from data import annotations_remote

    name = file_for(Path("."), run).name
    return annotations_remote.log_of(settings.store_url, settings.storage, name, _parse, MAX_LINE_BYTES)


def labels_for(settings, run: str, sample_ids: Iterable[str | None]) -> list[str]:
    """The labels each of ``sample_ids`` holds in ``run`` ("reward hack, repetition"; "" for none): the
    responses table's label column (the page's grid, and any JSON answer of its rows)."""
    held = of_run(settings, run).labels_by_sample()
    return [held.get(s, "") if s else "" for s in sample_ids]


def with_labelled(view, settings):
    """A responses view (:class:`data.views.responses.ResponsesView`) with the sample ids that hold its
    ``label`` now (its ``labelled``), which its filter keeps; the view as it is without a label."""
    if view.label is None or not view.run:
        return view
    return view.with_(labelled=of_run(settings, view.run).samples_with(view.label))


def save(settings, run: str, line: dict) -> None:
    """Append ``line`` (see :func:`record`) to ``run``'s annotations, within the settings' size and rate
    limits: to its local file, or on an object-storage cache as a new object of its own, written only if
    absent (:mod:`data.annotations_remote`); the rate then counted per host, in the local working folder."""
    if settings.store_url is None:
        append(
            file_for(settings.cache_dir, run), line, settings.annotation_file_bytes, settings.annotation_rate
        )
        return
    from data import annotations_remote

    data = _encoded(line)
    folder = Path(settings.cache_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".lock"):
        _take_turn(folder, line["who"], settings.annotation_rate, time.time())
    try:
        annotations_remote.put(
            _log(settings, run), data, settings.annotation_file_bytes, settings.refresh_seconds
        )
        annotations_remote.marked(_mark_file(settings, run))
    except annotations_remote.Full as e:
        raise AnnotationError(
            f"Not saved: this run's annotations on the object store have reached their limit ({e}; "
            f"{settings.annotation_file_bytes:,} bytes, RLBOARD_ANNOTATION_FILE_BYTES)."
        ) from None
    except OSError as e:
        raise AnnotationError(f"Not saved: the object store refused the annotation ({e}).") from None


def _encoded(line: dict) -> bytes:
    """``line`` as one line of JSON in UTF-8, refused over :data:`MAX_LINE_BYTES`."""
    data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", "surrogatepass"
    )
    if len(data) > MAX_LINE_BYTES:
        raise AnnotationError(f"Not saved: the annotation is over {MAX_LINE_BYTES // 1024} KB once written.")
    return data
