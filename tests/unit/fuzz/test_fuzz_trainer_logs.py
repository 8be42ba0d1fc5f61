"""Fuzzing the trainer's logs (data/trainer_logs/: a Hugging Face / TRL log history and TensorBoard event
files, found in a run folder and read): structured logs with odd steps and values, raw bytes, deep nesting,
event records framed right around any payload; read or noted, never an uncaught error (issue 33, item 7)."""

from __future__ import annotations

import json
import struct

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from data.trainer_logs.find import find_logs
from data.trainer_logs.read import MAX_STEP
from data.trainer_logs.scalars import align, read_logs
from tests.unit.fuzz.budget import BASE_BYTES, SCALARS, assert_bounded, budget, json_values, peak_bytes

LOG_KEYS = st.sampled_from(
    [
        "step",
        "loss",
        "reward",
        "rewards/acc/mean",
        "kl",
        "epoch",
        "train_runtime",
        "total_flos",
        "learning_rate",
    ]
)
STEPS = st.one_of(st.integers(-3, 50), st.sampled_from([2**62, 2**62 + 1, 2**63, -(2**63), 2**70]), SCALARS)


@st.composite
def histories(draw) -> bytes:
    """A log history as TRL writes it (a list, or trainer_state.json's object holding one), each entry
    a step and values of any type; or JSON of any shape; or bytes nested past the depth limit."""
    kind = draw(st.sampled_from(["state", "list", "list", "json", "deep", "bytes"]))
    if kind == "deep":
        n = draw(st.sampled_from([64, 65, 100_000]))
        return b'{"log_history": ' + b"[" * n + b"]" * n + b"}"
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(json_values(LOG_KEYS)), allow_nan=True).encode()
    entries = draw(
        st.lists(
            st.dictionaries(LOG_KEYS, st.one_of(st.floats(), SCALARS), max_size=5).flatmap(
                lambda d: st.builds(lambda s: {**d, "step": s}, STEPS) if "step" not in d else st.just(d)
            ),
            max_size=8,
        )
    )
    body = {"log_history": entries, "global_step": 3} if kind == "state" else entries
    return json.dumps(body, allow_nan=True).encode()


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord frames use, bit by bit (a few hundred bytes here)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = _crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _record(payload: bytes) -> bytes:
    """One TFRecord: length, its CRC, the payload, its CRC (a reader checks both)."""
    header = struct.pack("<Q", len(payload))
    return header + _masked(header) + payload + _masked(payload)


@st.composite
def event_payloads(draw) -> bytes:
    """An Event proto: a scalar as TensorBoard's writers put it (simple_value, or a tensor under the
    scalars plugin) with odd steps, dtypes, shapes and contents; or any bytes."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2

    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=80))
    ev = event_pb2.Event(step=draw(st.integers(-(2**63), 2**63 - 1)), wall_time=draw(st.floats()))
    value = ev.summary.value.add(tag=draw(st.sampled_from(["train/loss", "train/reward", "", "x" * 300])))
    if draw(st.booleans()):
        value.simple_value = draw(st.floats(width=32))
    else:
        value.metadata.CopyFrom(summary_pb2.SummaryMetadata(plugin_data={"plugin_name": "scalars"}))
        dims = draw(st.lists(st.integers(-1, 3), max_size=2))
        tensor = tensor_pb2.TensorProto(
            dtype=draw(st.integers(0, 30)),
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[{"size": d} for d in dims]),
            tensor_content=draw(st.binary(max_size=16)),
        )
        for v in draw(st.lists(st.floats(width=32), max_size=3)):
            tensor.float_val.append(v)
        value.tensor.CopyFrom(tensor)
    return ev.SerializeToString()


@st.composite
def event_files(draw) -> bytes:
    """An events file: framed records (the first a file_version, as writers start) maybe cut short or with
    a bad CRC, or raw bytes."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=300))
    from tensorboard.compat.proto import event_pb2

    data = _record(event_pb2.Event(file_version="brain.Event:2").SerializeToString())
    for payload in draw(st.lists(event_payloads(), max_size=5)):
        data += _record(payload)
    how = draw(st.sampled_from(["whole", "whole", "cut", "flip"]))
    if how == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ 0x55]) + data[i + 1 :]
    return data


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    run = tmp_path_factory.mktemp("warm")
    (run / "trainer_state.json").write_text('{"log_history": [{"step": 1, "loss": 0.5}]}')
    (run / "events.out.tfevents.1.host").write_bytes(b"")
    read_logs(find_logs(run))


def _read(run):
    scalars = read_logs(find_logs(run))
    return scalars, align(scalars, [0, 1, 2]), scalars.catalog()


@budget(60)
@given(
    state=histories(), history=st.one_of(st.none(), histories()), events=st.one_of(st.none(), event_files())
)
def test_fuzz009_trainer_logs_are_read_or_noted(tmp_path_factory, state, history, events):
    """A run folder's trainer_state.json, log_history.json and an events file, each fuzzed: found, read
    and aligned with the rollout steps without raising; every point a text key, an int step within ±2^62
    and a float; what was left out said in a note; memory bounded by the files' sizes."""
    run = tmp_path_factory.mktemp("fuzz009")
    (run / "checkpoint-5").mkdir()
    (run / "checkpoint-5" / "trainer_state.json").write_bytes(state)
    sizes = len(state)
    if history is not None:
        (run / "trl_log_history.json").write_bytes(history)
        sizes += len(history)
    if events is not None:
        (run / "runs" / "host").mkdir(parents=True)
        (run / "runs" / "host" / "events.out.tfevents.1.host").write_bytes(events)
        sizes += len(events)
    (scalars, _, catalog), peak = peak_bytes(_read, run)
    frame = scalars.frame
    assert frame.schema["step"] == pl.Int64 and frame.schema["value"] == pl.Float64
    if frame.height:
        assert frame.get_column("step").abs().max() <= MAX_STEP
    assert catalog.height == frame.get_column("key").n_unique()
    assert all(isinstance(n, str) and n for n in scalars.notes)
    assert_bounded(peak, BASE_BYTES + 256 * sizes, "trainer logs")
