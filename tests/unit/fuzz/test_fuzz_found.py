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
    KeyError, went out of the events reader: no scalar of the run was read). The good point is read; the
    other four are left out and counted in notes, the step by the rule of the JSON logs (within ±2^62).
    Found by test_fuzz009 (its long budget found the KeyError); the streaming reader merged from main had
    the same fault, and ValueError on a tensor's contents too."""
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
        "runs/host: 1 events with a step beyond ±2^62 were left out.",
        "runs/host: 3 scalar points that are not readable numbers were left out.",
    )


# A Parquet file of chat messages, a list of floats and texts (as Polars 1.x writes it, uncompressed) with one
# byte changed, zlib-compressed and in base64: at byte 309 (Polars' own reader then asks for 2^61 bytes and
# aborts the process) and at byte 1140 (the schema's metadata: Polars panics taking pyarrow's rows).
ABORTS_POLARS = (
    "eNqtVc1O20AQ3jjGOBFSKepatpRDDo0FAkFiSJMgoN3wk9CGNI5EQdzy4wCqiSM7kMABIQ49caqqHnqoUE+t1GfopW/QU8UT9FT1"
    "AXro7NoxQUClqqzWO+P5+eab3bVcIuUERngFr0xgHhQBC5FHaJTfdwxbDlUcZ9dpV5pthBAHTxDxdH2ImKQxIZB+FB5SYkhQ8kLL"
    "tvZabd4E86BhGntGs83blmlgJPHS6wBMVZy7sQxQWMALV7gIO18/maYlByvV2jUeAkjXH6RMqrW/cRisWc02SEbjNABTPefmrpWA"
    "4jKWC5SDW85OsFUDTiN4ZAIP4OEeOc7WZM5OeIF8IBDkgEESCcOKLNqG07Kajtv2sXSsXvDqR/5KGkDO4tkr/YrIHU9kT/v12G+b"
    "Nhm8h/rsLBKHWdPpQPdKv6zuWQCmeiLM3Qat3OeUvjNQZHYqGCmS56O7osjeHvXZoQG6aH0mH9ZXgZzrjkgihqNHTD3n8GlPv+Bx"
    "wVNPBHzGzJhTPufhylhtLKAkJ3uniTksFObAn+Rl1inmqNfvl0d4KMbJ7K7FUCFCkaihd/D9Nv90PCPgBLo3FcDh2GUJ2FElohTU"
    "d4HIHdx26VsIS9IrEaeR+iEYuYO7K/0IYVn6IuI4Ur8PRP7pLkonYWDzU8QqUs8GI/91qaS3YeDxJoQXkPSel3hVBPGAHrI8RMrl"
    "5xuzTm3H2KvIv4NTdEyvZQkhy/CQ9AG8d3XivjPTM0IcssikTsZL4O90qH2VkG0vbg3EIgt+QRfC8nUKzbSlbS8eRnm9V4otBYo3"
    "te0nLbKg5SXijXHKp7NKstskR0NyrD5Nzc5Q/yZ9717LX+/ll1g89WcPtzaLnaqWPNpyI1dpZYd1qN/Kr0XzWSW3nodf7Klrfr9L"
    "yxQvx0JJH57uMVl8Sf1ZunW54kG1WTarTZ2kKP4h48+W3CV/nWRXKRTIZa9ux4UqHkFSmvGr7WUct58lh+EzEDO+tRFnoVOsf53i"
    "MOha/ulBdTMLzvl5JBdLllmxneho67C9YzXHogeG7exazag2mZiMR0er+7tmPZpqZOJatT7daNS1VKOR1uqJGS2VrsQzFS2TbDS0"
    "Rqpi1DPamEK/ZX+iPPwnSvCL+wMBy30g"
)

BAD_METADATA = (
    "eNqtVU9PE0EUn27XpW1IROJsdpMeerAbCEbahdqWADr9Q1sttW2CEG79swXi0m12Cy0cCOHgiZMxHjwY4kkTP4OJ8Rt4MnwCT8YP"
    "4ME3s9ulDWBiZDI77+3783u/NzObLZNqFCO8glfuYx4UAQvBh2iK37M0U/LXLGvH6tbaXYQQB48X8XS9h5ikMX6QbhQel8NIkPNC"
    "xzR2O11eB/OYpmu7WrvLm4auYSTy4isPTMW3eGUZoLCMl0e4CNtfP+q6IXlr9cYlHgJI2++lTOqNv3EYaxjtLkhG48QDUznjFi+V"
    "gOISloqUg13OjLJVBU6TeJKSmxiQ40xV4syoE8h7PF4OGMSQMCFLPlOzOkbbsts+Eo+Uc175wI+kAeQCXhjp14fs8VhytF+P3LZp"
    "k97baMjOInGANZ3w9Ef6ZXVPPTCVY2HxOmj5DicPnYEssVPBSBYdH90VWXL2aMgODdBFHTK5sK4K5Gx3UPRhOHrE1DMOnwz0cx4X"
    "HfVYwKfMjDn5Ux6ujNHFAopxknOamMNCcRH8MV5inWKOet1+eYTHw5zE7loYFYMUiRoGBz9sc0/HMQKOp39VARwIX5SAHZWDclF5"
    "6wnewG0Xv/mxKL704QRS3nuDN3B3xR9+LImffTiClO+3gv90F8XjALD56cMKUk7Hgv91qcQ3AeDx2o+XkfiOF3nFB+IuPWRp/Eu1"
    "+mx9wWpsa7s16bd3lo651RQhJAsPSezDe79C7HdmekqIRdJMVshMGfy9HrUXCNly4lZBpFnwc7oQll+h0EzLbDnxMKprg1JsKVK8"
    "2S03Kc2CshnijBnKp1cgqS2SoyE5Vp+mpuapf4O+9y/lrw3yyyye+lMHmxulXl2NHW7akQVa2WIdVq7l16H5rJJdz8EvDdRVt99M"
    "luLlWCgZwqs4TNIvqD9Fty5X2q+3q3q9XSFxin/A+LMld8G/QlIFCgUy69Tt2VClQ0hKMH6N3aRl95OxGD4D0SOb6xEWOsv6r1Ac"
    "Bt3IP9mvb6TAubSEpFLZ0GumFZrqHHS3jfZ0aF8zrR2jHVIfRB9EQlP1vR29GYq3khG13pxrtZpqvNVKqM3ovBpP1CLJmpqMtVpq"
    "K17Tmkl1WqbfsjtRHv4TZfjF/QE1qH2f"
)


def _damaged(blob: str) -> bytes:
    import base64
    import zlib

    return zlib.decompress(base64.b64decode(blob))


def test_found006_a_damaged_parquet_file_does_not_abort_the_ingest(tmp_path):
    """A Parquet file with one byte changed, beside a good file, ingested by the command line (before:
    Polars' reader asked for 2^61 bytes and the process aborted, SIGABRT: no store, no summary; a server's
    worker would die with it). It is reported as damaged; the good file's rows are kept. Found chasing a failure of
    test_fuzz006's long budget (a panic in a damaged chat column) by changing each byte of such a file in
    turn: 0 aborts and 0 panics in 16,056 such files since b9ab120 and this fix, where Polars' reader
    aborted at byte 309."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    run = tmp_path / "root" / "run"
    run.mkdir(parents=True)
    (run / "damaged.parquet").write_bytes(_damaged(ABORTS_POLARS))
    (run / "good.jsonl").write_bytes(_good(3))
    p = subprocess.run(
        [
            sys.executable,
            "app.py",
            "ingest",
            str(tmp_path / "root"),
            "--json",
            "--cache-dir",
            str(tmp_path / "c"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, (p.returncode, p.stderr[-500:])
    assert json.loads(p.stdout)["runs"][0]["samples"] == 3
    store = open_store(next((tmp_path / "c").glob("run-*")))
    issues = {(r["source"], r["line"]): r["reason"] for r in store.issues().iter_rows(named=True)}
    assert issues == {("damaged.parquet", 1): "file cut short or damaged: read again when it changes"}


def test_found007_a_parquet_file_with_damaged_metadata_is_read_or_reported(tmp_path):
    """A Parquet file whose schema metadata has a byte changed (invalid UTF-8), beside a good file (before:
    once read through pyarrow, Polars panicked on that metadata taking its rows, and a panic is no
    Exception: the run's ingest stopped). Its rows are read (the metadata is pyarrow's, already used), each
    reported as the table has no reward; the good file's rows are kept. Found by test_fuzz006."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "damaged.parquet").write_bytes(_damaged(BAD_METADATA))
    (run / "good.jsonl").write_bytes(_good(3))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert store.scalars().height == 3
    issues = {(r["source"], r["line"]): r["reason"] for r in store.issues().iter_rows(named=True)}
    missing = "missing required field 'reward'"
    assert issues == {("damaged.parquet", 1): missing, ("damaged.parquet", 2): missing}


def test_found008_a_trl_line_with_a_list_of_mixed_types_is_read_or_reported(tmp_path):
    """TRL completions as JSON lines, one line's completion a list of a bool and a number (before: TRL's
    line mapping put the whole line in a one-row DataFrame, and Polars' TypeError on that list stopped the
    run's ingest). That line is reported (its completion is no text), the others are read with their reward
    summed from the reward functions' columns. Found by test_fuzz003's long budget."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {"prompt": "p", "completion": "c", "accuracy": 1.0, "format": 0.5, "advantage": 0.1, "step": 1},
        {
            "prompt": "p",
            "completion": [False, 0],
            "accuracy": 1.0,
            "format": 0.5,
            "advantage": 0.1,
            "step": 1,
        },
        {"prompt": "q", "completion": "d", "accuracy": 0.0, "format": 0.5, "advantage": -0.1, "step": 1},
    ]
    (run / "completions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    rows = store.scalars().sort("line").select("line", "reward").rows()
    assert rows == [(1, 1.5), (3, 0.5)]
    issues = {
        r["line"]: r["reason"] for r in store.issues().iter_rows(named=True) if r["severity"] == "error"
    }
    assert list(issues) == [2] and "response" in issues[2], issues


def test_found009_weights_fitted_to_trls_log_are_held_to_the_weight_limit(tmp_path):
    """A TRL log history whose reward function's mean is ~1e-136 where the reward is 1 (before: the weights
    fitted to it, 1.3e136, were taken, where rlboard.toml's and the setting's are held to ±1e6, and every
    reward summed with them overflowed). No weight is fitted; the function's name is still read. Found by
    test_fuzz007's long budget."""
    from data.ingest.options import load_options

    history = [
        {"step": 0, "reward": 1.0, "rewards/acc/mean": 7.612484496725388e-137},
        {"step": 1, "reward": 0.0, "rewards/acc/mean": 0.0},
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    opts = load_options(tmp_path)
    assert opts.reading.reward_parts == ("acc",)
    assert opts.reading.reward_weights is None
