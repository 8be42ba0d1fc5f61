"""A mapping anyone can write, for files no dialect knows: ``[fields]`` in ``rlboard.toml`` names where each
record keeps its prompt, response, reward, step and group, as dotted paths (``query.text``,
``messages.0.content``); the step may also be ``"folder"`` (the integer in the name of the file's parent
folder: ``4``, ``step_4``), ``"file"`` (the integer in the file's name) or a regex over the file's path
inside the run with one group. Applied before any guess; every other field stays an extra column, and a
field it does not name is read by the contract's names."""

from __future__ import annotations

import re

from data.schema.contract import BadLine, extra_name
from data.schema.dialects.base import FILE, FOLDER, LINE_NOTES, NAMES, Dialect, FieldMap, base_name
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

GROUP_COLUMN = "group_id"  # the column a group is read from (see data.metrics.group)
MAX_PATH = 200  # characters of a path or regex in [fields]
_DIGITS = re.compile(r"\d+")


def parse_fields(table, where: str, problems: list[str], source: str = "rlboard.toml") -> FieldMap | None:
    """The ``[fields]`` table of an rlboard.toml as a :class:`FieldMap` (None when nothing in it can be used);
    what cannot be used is appended to ``problems`` (said on the runs page), never raised."""
    if not isinstance(table, dict):
        problems.append(f"{source}: [fields] is not a table of name = path")
        return None
    given = []
    for name, value in table.items():
        if name not in NAMES:
            problems.append(
                f"{source}: [fields] {str(name)[:40]!r} is not one of {', '.join(NAMES)}: left out"
            )
        elif not isinstance(value, str) or not value or len(value) > MAX_PATH:
            problems.append(
                f"{source}: [fields] {name} is not a path of 1 to {MAX_PATH} characters: left out"
            )
        elif name == "step" and "(" in value:
            try:
                groups = re.compile(value).groups
            except (re.error, RecursionError, OverflowError) as e:
                problems.append(f"{source}: [fields] step = {value!r} is not a regex ({e}): left out")
                continue
            if groups != 1:
                problems.append(f"{source}: [fields] step = {value!r} has {groups} groups, not one: left out")
                continue
            given.append((name, value))
        elif any(not seg for seg in value.split(".")):
            problems.append(f"{source}: [fields] {name} = {value!r} has an empty segment: left out")
        else:
            given.append((name, value))
    return FieldMap(tuple(given), where) if given else None


def find(obj: dict, path: str) -> tuple[bool, object]:
    """``(found, value)`` of a dotted path in a record: a key as written first (``"a.b"``), else key by key,
    a number indexing a list (``messages.0.content``)."""
    if path in obj:
        return True, obj[path]
    cur: object = obj
    for seg in path.split("."):
        if isinstance(cur, dict) and seg in cur:
            cur = cur[seg]
        elif isinstance(cur, list) and seg.isdigit() and int(seg) < len(cur):
            cur = cur[int(seg)]
        else:
            return False, None
    return True, cur


def _take(obj: dict, path: str) -> None:
    """Remove a mapped value from its record where it is an object's field (so that it is not also an extra
    column); a list's item stays (lists are not columns)."""
    if path in obj:
        del obj[path]
        return
    *parents, last = path.split(".")
    cur: object = obj
    for seg in parents:
        cur = cur.get(seg) if isinstance(cur, dict) else None
    if isinstance(cur, dict):
        cur.pop(last, None)


def line(obj: dict, reading=None) -> dict:
    """A record with the mapped fields moved to the contract's names (a record's own field of that name kept
    as ``extra_<name>``); a required one not found makes the line unusable, saying which mapping; a group
    not found is noted on the line (its group is then its prompt)."""
    fm = getattr(reading, "fields", None)
    if fm is None:
        return obj
    notes = []
    for name, path in fm.given:
        if name == "step" and fm.step_kind != "path":
            # The file's path gives the step (see step_of): a line's own is kept as a column.
            if "step" in obj:
                obj[extra_name("step")] = obj.pop("step")
            obj["step"] = None
            continue
        found, value = find(obj, path)
        canon = GROUP_COLUMN if name == "group" else name
        if not found or value is None:
            if name == "group":
                notes.append(f'[fields] group = "{path}": not in this line; grouped by its prompt')
                continue
            raise BadLine(f'[fields] {name} = "{path}": not found in this line')
        if path != canon:
            _take(obj, path)
            if canon in obj:
                obj[extra_name(canon)] = obj.pop(canon)
        obj[canon] = value
    if notes:
        obj[LINE_NOTES] = notes
    return obj


def _last_number(text: str) -> int | None:
    found = _DIGITS.findall(text)
    return int(found[-1]) if found else None


def step_of(fm: FieldMap, rel: str) -> tuple[int | None, str]:
    """The step a mapping gives a file from its path (``rel``: inside the run), and how: ``(step, "fields")``;
    ``(0, "none")`` where the mapping names it by path but this path gives none (step 0, said);
    ``(None, "lines")`` where it is a field of the lines; ``(None, "")`` where the mapping names none."""
    kind, step = fm.step_kind, fm.table.get("step")
    *folders, name = rel.split("/")
    if kind == FOLDER:
        got = _last_number(folders[-1]) if folders else None
    elif kind == FILE:
        got = _last_number(base_name(name))
    elif kind == "regex":
        m = re.search(step, rel)
        got = int(m.group(1)) if m is not None and m.group(1) and m.group(1).isdigit() else None
    else:
        return None, "lines" if kind == "path" else ""
    return (got, "fields") if got is not None else (0, "none")


def toml(table: dict[str, str], dialect: str | None = None) -> str:
    """A ready rlboard.toml that says ``table`` (field = path), to copy into a run folder and edit."""
    out = [] if dialect is None else [f'dialect = "{dialect}"', ""]
    out.append("[fields]")
    for name in NAMES:
        if name in table:
            out.append(f"{name} = {_quoted(table[name])}")
    return "\n".join(out) + "\n"


def _quoted(text: str) -> str:
    """A TOML basic string of ``text`` (backslashes, quotes and control characters escaped)."""
    body = "".join(
        "\\\\"
        if c == "\\"
        else '\\"'
        if c == '"'
        else f"\\u{ord(c):04x}"
        if ord(c) < 32 or ord(c) == 127
        else c
        for c in text
    )
    return f'"{body}"'


DIALECT = Dialect(
    name="fields",
    title="[fields] of rlboard.toml",
    description="a format no dialect knows, read by the mapping in rlboard.toml's [fields]",
    recognise=lambda rel, fields: 0,  # never guessed: used where a [fields] table is given
    aliases=CONTRACT_ALIASES,
    mapping=("each field as [fields] names it; the others by the contract's names, or as extra columns",),
    line=line,
)
