"""What the fuzz tests found, each a named regression test that failed before its fix (issue 33, item 7)."""

from __future__ import annotations

import gzip
import json

from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>",)


def _good(n: int) -> bytes:
    return b"".join(
        (json.dumps({"prompt": f"p{i}", "response": "r", "reward": 1.0, "step": 1}) + "\n").encode()
        for i in range(n)
    )


def test_found001_lines_of_no_field_are_reported_not_a_crash(tmp_path):
    """Two lines ``{}`` in one block (before: Polars' path conformed them to one row, then failed with a
    ShapeError that stopped the whole run's ingest): each is reported as missing its prompt, every other
    line and file kept. Found by test_fuzz002 (verifiers' results.jsonl; every dialect but NeMo's)."""
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    for run in (alone, beside):
        run.mkdir()
        (run / "results.jsonl").write_bytes(b"{}\n{}\n")
    (beside / "rank0.jsonl").write_bytes(_good(3) + b"{}\n{}\n" + _good(2))
    missing = "missing required field 'prompt'"
    for run, rows, bad in ((alone, 0, {1, 2}), (beside, 5, {1, 2, 4, 5})):
        store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
        assert store.scalars().height == rows
        issues = {(r["source"], r["line"]): r["reason"] for r in store.issues().iter_rows(named=True)}
        assert set(issues.values()) == {missing} and {line for _, line in issues} == bad, issues


def test_found002_a_compressed_file_is_inflated_no_further_than_its_cap(tmp_path, monkeypatch):
    """A .jsonl.gz of 24 MB of blank lines under RLBOARD_MAX_INFLATED_BYTES=256 KiB is inflated to the cap
    and one byte more, then refused (before: a whole block of the ingest's chunk size, 30 MB, was inflated
    before the cap was looked at: the cap bounded what was kept, not what was held). Found by
    bounding test_fuzz005's memory (the ingest's chunk size there is small)."""
    from data.ingest import files

    cap = 256 << 10
    monkeypatch.setenv("RLBOARD_MAX_INFLATED_BYTES", str(cap))
    inflated = []

    def counted(path):
        f = opened(path)
        read = f.read

        def read_counted(n=-1):
            piece = read(n)
            inflated.append(len(piece))
            return piece

        f.read = read_counted
        return f

    opened = files._open_text
    monkeypatch.setattr(files, "_open_text", counted)
    run = tmp_path / "run"
    run.mkdir()
    (run / "bomb.jsonl.gz").write_bytes(gzip.compress(_good(3) + b"\n" * (24 << 20), compresslevel=1))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert store.scalars().height == 3
    assert sum(inflated) <= cap + 1, f"{sum(inflated):,} bytes inflated"
    reasons = [r["reason"] for r in store.issues().iter_rows(named=True)]
    assert len(reasons) == 1 and reasons[0].startswith("inflates past 262,144 bytes"), reasons


def test_found003_a_parquet_file_decoding_past_what_its_footer_says_is_refused(tmp_path, monkeypatch):
    """A TRL completions table of 1,024 rows that repeat one 4 KiB completion (dictionary-encoded: a ~4 KB
    file whose footer says ~20 KB) decodes to 4 MiB, over RLBOARD_MAX_PARQUET_BYTES=1 MiB (before: only the
    footer's sizes were checked, and such a file decoded whole; at 200,000 rows, 800 MB). It is refused,
    said with the limit's name; a small table beside it is read. Found by test_fuzz006."""
    import polars as pl

    monkeypatch.setenv("RLBOARD_MAX_PARQUET_BYTES", str(1 << 20))
    run = tmp_path / "run" / "completions"
    run.mkdir(parents=True)
    n = 1024
    rows = {"step": [1] * n, "prompt": ["p"] * n, "completion": ["z" * 4096] * n, "reward": [1.0] * n}
    pl.DataFrame(rows).write_parquet(run / "completions_00001.parquet", compression="zstd")
    small = {k: v[:4] for k, v in rows.items()} | {"step": [2] * 4}
    pl.DataFrame(small).write_parquet(run / "completions_00002.parquet")
    store = open_store(ingest_run(tmp_path / "run", tmp_path / "cache", PADS).store_dir)
    assert store.scalars().get_column("step").to_list() == [2] * 4
    issues = {(r["source"], r["line"]): r["reason"] for r in store.issues().iter_rows(named=True)}
    reason = issues.pop(("completions/completions_00001.parquet", 1))
    assert (
        reason.startswith("decodes to ")
        and "over the limit of 1,048,576 (RLBOARD_MAX_PARQUET_BYTES)" in reason
    )
    assert issues == {}


def test_found004_an_events_file_without_scalars_is_no_error(tmp_path):
    """A TensorBoard events file that holds no scalar yet, as a SummaryWriter leaves it when it opens
    (its version record only), or empty, beside a trainer_state.json (before: TensorBoard's reader raised
    KeyError "Plugin 'scalars' could not be found" out of read_events, to every caller of
    trainer_scalars: the compare page's trainer charts). The log history's points are read; the events give none. Found by
    test_fuzz009's warm-up."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from data.trainer_logs.find import find_logs
    from data.trainer_logs.scalars import read_logs

    for events in ("opened", "empty"):
        run = tmp_path / events
        (run / "runs" / "host").mkdir(parents=True)
        (run / "trainer_state.json").write_text('{"log_history": [{"step": 1, "loss": 0.5}]}')
        if events == "opened":
            writer = EventFileWriter(str(run / "runs" / "host"))
            writer.close()
        else:
            (run / "runs" / "host" / "events.out.tfevents.1.host").write_bytes(b"")
        logs = find_logs(run)
        assert [f.kind for f in logs] == ["trainer_state", "tensorboard"], events
        scalars = read_logs(logs)
        assert scalars.frame.select("key", "step", "value").rows() == [("loss", 1, 0.5)], events


def test_found005_an_unreadable_scalar_point_is_left_out_and_said(tmp_path):
    """An events file whose scalars plugin holds tensors of dtypes TensorBoard does not know (24, 20), a
    complex number, and a point at step 2^63 - 1, beside a good point (before: make_ndarray's TypeError, or
    KeyError, went out of read_events: no scalar of the run was read). The good point is read; the four are
    left out and counted in a note, the step by the rule of the JSON logs (within ±2^62). Found by
    test_fuzz009 (its long budget found the KeyError)."""
    import numpy as np
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    from data.trainer_logs.find import find_logs
    from data.trainer_logs.scalars import read_logs

    logdir = tmp_path / "run" / "runs" / "host"
    logdir.mkdir(parents=True)
    scalars = summary_pb2.SummaryMetadata(plugin_data={"plugin_name": "scalars"})
    points = [
        (1, tensor_util.make_tensor_proto(np.float32(0.5))),
        (2, tensor_pb2.TensorProto(dtype=24, float_val=[1.0])),
        (2, tensor_pb2.TensorProto(dtype=20, float_val=[1.0])),
        (3, tensor_util.make_tensor_proto(np.complex64(1 + 2j))),
        (2**63 - 1, tensor_util.make_tensor_proto(np.float32(2.0))),
    ]
    writer = EventFileWriter(str(logdir))
    for step, tensor in points:
        ev = event_pb2.Event(step=step, wall_time=1.0)
        ev.summary.value.add(tag="train/loss", metadata=scalars, tensor=tensor)
        writer.add_event(ev)
    writer.close()
    logs = read_logs(find_logs(tmp_path / "run"))
    assert logs.frame.select("key", "step", "value").rows() == [("train/loss", 1, 0.5)]
    assert logs.notes == (
        "runs/host: 4 scalar points that are not readable numbers (or at a step beyond ±2^62) were left out.",
    )
