"""Annotations' file (data/annotations.py): latest wins, bounded, concurrent writers lose nothing."""

from __future__ import annotations

import json
import multiprocessing as mp
from datetime import UTC, datetime

import pytest

from data import annotations as an

LABELS = an.DEFAULT_LABELS


def _write(path, sample, label, note="", who="ann", span=None, rate=None, max_bytes=1 << 20):
    an.append(path, an.record(sample, label, LABELS, note, who, span), max_bytes, rate)


def test_annotations001_latest_wins_per_sample_and_span(tmp_path):
    """Two lines of one key: the second stands; a span is its own key; a null label removes."""
    path = an.file_for(tmp_path, "run")
    _write(path, "s1", "good", "first")
    _write(path, "s1", "reward hack", "second")
    _write(path, "s1", "repetition", span=(3, 5))
    _write(path, "s2", "good")
    _write(path, "s2", None)
    got = an.read(path, 1 << 20)
    assert [(a.sample_id, a.span, a.label, a.note) for a in got.items] == [
        ("s1", None, "reward hack", "second"),
        ("s1", (3, 5), "repetition", ""),
    ]
    assert got.labels_by_sample() == {"s1": "reward hack, repetition"}
    assert got.samples_with("repetition") == ("s1",) and got.samples_with("good") == ()
    assert an.spans_of(got, "s1") == [{"from": 3, "to": 5, "label": "repetition"}]


def test_annotations002_malformed_line_skipped_and_said(tmp_path):
    """A torn or foreign line is skipped, counted and said; the lines around it stand."""
    path = an.file_for(tmp_path, "run")
    _write(path, "s1", "good")
    with open(path, "ab") as f:
        f.write(b'{"sample_id": "s2", "lab\n[1, 2]\n')
    _write(path, "s3", "truncated")
    got = an.read(path, 1 << 20)
    assert [a.sample_id for a in got.items] == ["s1", "s3"]
    assert got.skipped == 2 and "2 line(s)" in got.notice()


def test_annotations003_note_over_8kb_refused_with_reason(tmp_path):
    """A 1 MB note is refused with its size and the limit; nothing is written."""
    path = an.file_for(tmp_path, "run")
    with pytest.raises(an.AnnotationError, match=r"1,048,576 bytes, over the limit of 8,192"):
        _write(path, "s1", "good", "x" * (1 << 20))
    assert not path.exists()
    _write(path, "s1", "good", "é" * 4096)  # 8,192 bytes in UTF-8: at the limit, kept
    assert an.read(path, 1 << 20).items[0].note == "é" * 4096


def test_annotations004_label_outside_the_set_refused(tmp_path):
    with pytest.raises(an.AnnotationError, match="not one of this run's labels"):
        an.record("s1", "<b>bold</b>", LABELS)


def test_annotations005_file_size_bounded(tmp_path):
    """Past the file's limit a write is refused with the setting's name."""
    path = an.file_for(tmp_path, "run")
    _write(path, "s1", "good", max_bytes=400)
    with pytest.raises(an.AnnotationError, match="RLBOARD_ANNOTATION_FILE_BYTES"):
        for i in range(10):
            _write(path, f"s{i}", "good", max_bytes=400)
    assert path.stat().st_size <= 400


def test_annotations006_rate_per_user(tmp_path):
    """A user's writes past the rate in a minute are refused; another user still writes; a minute later
    the first one writes again."""
    path = an.file_for(tmp_path, "run")
    line = an.record("s1", "good", LABELS, who="ann")
    for _ in range(3):
        an.append(path, line, 1 << 20, rate=3, now=1000.0)
    with pytest.raises(an.AnnotationError, match="ann wrote 3 annotations in the last minute"):
        an.append(path, line, 1 << 20, rate=3, now=1010.0)
    an.append(path, an.record("s1", "good", LABELS, who="bob"), 1 << 20, rate=3, now=1010.0)
    an.append(path, line, 1 << 20, rate=3, now=1061.0)


def test_annotations007_file_name_from_untrusted_run(tmp_path):
    """A run name with separators or dots stays inside the folder, and two names never share a file."""
    a, b = an.file_for(tmp_path, "../../etc/passwd"), an.file_for(tmp_path, "..__..__etc_passwd")
    assert a.parent == b.parent == tmp_path / "annotations" and a != b
    assert "/" not in a.name and not a.name.startswith(".")


def test_annotations008_record_fields():
    """The line holds who and when (UTC) as given, the span as a list."""
    when = datetime(2026, 11, 29, 14, 0, 5, tzinfo=UTC)
    line = an.record("s1", "good", LABELS, "n", "ann", (2, 4), when)
    assert line == {"sample_id": "s1", "span": [2, 4], "label": "good", "note": "n", "who": "ann",
                    "when": "2026-11-29T14:00:05Z"}  # fmt: skip
    assert an.record("s1", "good", LABELS)["who"] == "anonymous"
    with pytest.raises(an.AnnotationError, match="first not after the last"):
        an.record("s1", "good", LABELS, span=(5, 2))


def _writer(path, who, n, start):
    start.wait()
    for i in range(n):
        an.append(path, an.record(f"{who}-{i}", "good", LABELS, "note " * 20, who), 64 << 20)


def test_annotations009_two_processes_keep_all_1000(tmp_path):
    """Two processes appending 500 annotations each at once: all 1,000 lines whole, all 1,000 read."""
    path = an.file_for(tmp_path, "run")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, w, 500, start)) for w in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = path.read_bytes().splitlines()
    assert len(lines) == 1000 and all(json.loads(x)["label"] == "good" for x in lines)
    got = an.read(path, 64 << 20)
    assert len(got.items) == 1000 and got.skipped == 0


def test_annotations010_label_set_from_rlboard_toml(tmp_path):
    """The run's rlboard.toml [annotations] labels win over the root's; a bad label is dropped and said."""
    run = tmp_path / "run"
    run.mkdir()
    assert an.label_set(run, tmp_path) == (an.DEFAULT_LABELS, [])
    (tmp_path / "rlboard.toml").write_text('[annotations]\nlabels = ["hack", "ok"]\n')
    assert an.label_set(run, tmp_path) == (("hack", "ok"), [])
    (run / "rlboard.toml").write_text('[annotations]\nlabels = ["off by one", "", 3, "x\\ny"]\n')
    labels, problems = an.label_set(run, tmp_path)
    assert labels == ("off by one",) and "kept 1 of 4" in problems[0]


def test_annotations011_label_in_view_url_and_filter():
    """label= round-trips through the responses view's URL; its filter keeps the labelled sample ids only
    (none before the view is shown on its run), and the view in words says so."""
    import polars as pl

    from data.views.responses import ResponsesView

    view, notes = ResponsesView.from_query({"run": ["r"], "label": ["reward hack"], "step": ["all"]})
    assert notes == [] and view.label == "reward hack"
    assert "label=reward+hack" in view.to_query() and "labelled" not in view.to_query()
    assert view.response_filter([1, 2]).samples == ()
    shown = view.with_(labelled=("a-1", "b-2"))
    flt = shown.response_filter([1, 2])
    rows = pl.DataFrame({"sample_id": ["a-1", "a-2", "b-2"], "step": [1, 1, 2]})
    assert rows.filter(flt.scalar_expr()).get_column("sample_id").to_list() == ["a-1", "b-2"]
    assert "labelled 'reward hack'" in shown.describe([1, 2])
    assert ResponsesView.from_query({"run": ["r"]})[0].response_filter([1]).samples is None
    assert view.cleared().label is None


def test_annotations012_labels_for_rows(tmp_path):
    """The label column of a block of rows (in their order, "" for none). (A cache on object storage no
    longer refuses writes: tests/integration/test_annotations_s3.py.)"""
    from data.config import Settings

    settings = Settings(cache_dir=tmp_path)
    an.save(settings, "run", an.record("s1", "good", LABELS))
    an.save(settings, "run", an.record("s1", "truncated", LABELS, span=(0, 3)))
    assert an.labels_for(settings, "run", ["s2", "s1", None]) == ["", "good, truncated", ""]
    assert an.labels_for(settings, "run", ["s2"]) == [""]


def test_annotations013_reads_only_whole_appended_lines(tmp_path):
    """A reader resumes where it stopped: a line seen half-written is read once whole, never skipped; a
    file replaced by a shorter one is read again from its start."""
    path = an.file_for(tmp_path, "run")
    _write(path, "s1", "good")
    assert [a.sample_id for a in an.read(path, 1 << 20).items] == ["s1"]
    line = json.dumps(an.record("s2", "truncated", LABELS)).encode() + b"\n"
    with open(path, "ab") as f:
        f.write(line[:20])
    got = an.read(path, 1 << 20)
    assert [a.sample_id for a in got.items] == ["s1"] and got.skipped == 0
    with open(path, "ab") as f:
        f.write(line[20:])
    got = an.read(path, 1 << 20)
    assert [a.label for a in got.items] == ["good", "truncated"] and got.skipped == 0
    tmp = path.with_suffix(".new")
    tmp.write_bytes(line)
    tmp.replace(path)
    assert [a.sample_id for a in an.read(path, 1 << 20).items] == ["s2"]
