"""rlboard.toml's [fields]: what a table may say, how a record and a path are read by it, and what is
reported when it cannot be used (never a crash)."""

from __future__ import annotations

import copy
import tomllib

from data.schema import BadLine, Reading, validate_record
from data.schema.dialects import MAPPED
from data.schema.dialects.mapping import FieldMap, find, parse_fields, step_of, toml


def test_fieldsmap001_what_a_table_may_say():
    """Known names with paths are kept; an unknown name, an empty segment, a non-string, a regex that does
    not compile or has other than one group are left out, each said."""
    problems: list[str] = []
    fm = parse_fields(
        {
            "prompt": "query.text",
            "response": "answer",
            "reward": 1,
            "step": r"iter(\d+",
            "group": "a..b",
            "score": "x",
        },
        "run",
        problems,
    )
    assert fm is not None and fm.given == (("prompt", "query.text"), ("response", "answer"))
    assert len(problems) == 4
    assert any("reward is not a path" in p for p in problems)
    assert any("step = 'iter(\\\\d+' is not a regex" in p for p in problems)
    assert any("empty segment" in p for p in problems)
    assert any("'score' is not one of" in p for p in problems)
    problems = []
    assert parse_fields({"step": r"(a)(\d+)"}, "run", problems) is None
    assert problems == ["rlboard.toml: [fields] step = '(a)(\\\\d+)' has 2 groups, not one: left out"]
    assert parse_fields(["prompt"], "run", problems) is None and problems[-1].endswith(
        "not a table of name = path"
    )
    kinds = {s: FieldMap((("step", s),)).step_kind for s in ("folder", "file", r"it_(\d+)", "meta.iter")}
    assert kinds == {"folder": "folder", "file": "file", r"it_(\d+)": "regex", "meta.iter": "path"}


def test_fieldsmap002_dotted_paths():
    """A key as written first, then key by key, a number indexing a list; not found is said as such."""
    rec = {"a.b": 1, "a": {"b": 2, "c": [{"d": "x"}, {"d": "y"}]}, "m": [{"content": "hi"}]}
    assert find(rec, "a.b") == (True, 1)
    assert find(rec, "a.c.1.d") == (True, "y")
    assert find(rec, "m.0.content") == (True, "hi")
    assert find(rec, "m.1.content") == (False, None)
    assert find(rec, "a.z") == (False, None)


def test_fieldsmap003_steps_from_the_path():
    """folder: the last integer of the parent folder's name (a file in the run folder: none, step 0 said);
    file: of the file's name; a regex's group over the path; a field: each line's own."""
    folder, file = FieldMap((("step", "folder"),)), FieldMap((("step", "file"),))
    regex, field = FieldMap((("step", r"epoch-(\d+)/"),)), FieldMap((("step", "meta.iter"),))
    assert step_of(folder, "iter_4/rank1.jsonl") == (4, "fields")
    assert step_of(folder, "out/12/a.jsonl") == (12, "fields")
    assert step_of(folder, "rank1.jsonl") == (0, "none")
    assert step_of(file, "dump/batch-7-of-9.jsonl") == (9, "fields")
    assert step_of(file, "dump/data.jsonl") == (0, "none")
    assert step_of(regex, "epoch-3/x/1.jsonl") == (3, "fields")
    assert step_of(regex, "other/1.jsonl") == (0, "none")
    assert step_of(field, "anything/5.jsonl") == (None, "lines")


def _read(obj: dict, fm: FieldMap, step: int | None = None):
    notes: list[str] = []
    rec, _ = validate_record(copy.deepcopy(obj), step, notes, MAPPED, Reading(fields=fm))
    return rec, notes


def test_fieldsmap004_a_record_mapped():
    """Mapped values take the contract's names (not also extra columns); a record's own field of that name
    stays as extra_<name>; other fields stay extra columns; a required path missing makes the line
    unusable, naming the mapping; a group missing is a note on the line."""
    fm = FieldMap(
        (("prompt", "query.text"), ("response", "answer"), ("reward", "score.total"), ("step", "meta.iter"),
         ("group", "example_id"))
    )  # fmt: skip
    obj = {
        "query": {"text": "Q", "lang": "en"},
        "answer": "A",
        "score": {"total": 0.5, "fmt": 1.0},
        "meta": {"iter": 3},
        "step": 99,
        "example_id": 7,
    }
    rec, notes = _read(obj, fm)
    assert (rec["prompt"], rec["response"], rec["reward"], rec["step"], rec["group_id"]) == (
        "Q",
        "A",
        0.5,
        3,
        7,
    )
    assert rec["extra_step"] == 99 and rec["query.lang"] == "en" and rec["score.fmt"] == 1.0
    assert "query.text" not in rec and "score.total" not in rec and notes == []
    rec, notes = _read({k: v for k, v in obj.items() if k != "example_id"}, fm)
    assert "group_id" not in rec and notes == [
        '[fields] group = "example_id": not in this line; grouped by its prompt'
    ]
    try:  # BadLine is frozen: pytest.raises cannot set its traceback
        _read({**obj, "score": {}}, fm)
        raise AssertionError("read")
    except BadLine as e:
        assert e.reason == '[fields] reward = "score.total": not found in this line'

    by_folder = FieldMap(
        (("prompt", "messages.0.content"), ("response", "messages.1.content"), ("step", "folder"))
    )
    chat = {"messages": [{"content": "q"}, {"content": "a"}], "reward": 1, "step": 5}
    rec, _ = _read(chat, by_folder, step=2)
    assert (rec["prompt"], rec["response"], rec["step"], rec["extra_step"]) == ("q", "a", 2, 5)


def test_fieldsmap005_a_ready_toml():
    """The table written back as TOML that reads back to the same table, whatever its characters."""
    table = {"prompt": 'a."b"', "step": r"run\\(\d+)\n", "group": "g\u0001"}
    text = toml(table, None)
    assert tomllib.loads(text)["fields"] == table
    assert text.startswith("[fields]\nprompt = ")


def test_fieldsmap006_the_run_s_own_replaces_the_root_s(tmp_path):
    """The root's rlboard.toml gives its [fields] (only those) to a run without its own; a run's own
    replaces it; nothing above the root is read (a root that is itself the run, or no root given)."""
    from data.ingest.options import load_options

    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (tmp_path / "rlboard.toml").write_text('[fields]\nprompt = "above"\n')
    (root / "rlboard.toml").write_text('dialect = "verl"\n[fields]\nprompt = "q"\nstep = "folder"\n')
    (root / "b" / "rlboard.toml").write_text('[fields]\nresponse = "a"\n')
    a = load_options(root / "a", root=root)
    assert (a.fields.given, a.fields.where, a.dialect) == (
        (("prompt", "q"), ("step", "folder")),
        "root",
        None,
    )
    b = load_options(root / "b", root=root)
    assert (b.fields.given, b.fields.where) == ((("response", "a"),), "run")
    assert load_options(root / "a").fields is None
    assert load_options(root, root=root).fields.given == (("prompt", "q"), ("step", "folder"))
    assert load_options(root, root=root).fields.where == "run"
    assert a.key() != load_options(root / "a").key()  # another mapping: the store is read again
