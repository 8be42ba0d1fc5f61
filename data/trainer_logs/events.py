"""TensorBoard event files read as a stream, scalars only, in bounded memory: each file's records framed
as TensorBoard's own reader frames them, every checksum checked, each record parsed into TensorBoard's
``Event`` and dropped once its scalars are taken, no more than ``ReadLimits.tensorboard_points`` of them.

TensorBoard's reader (``plugin_event_accumulator`` over ``event_file_loader``) was used before: without
TensorFlow installed it checks each record's CRC-32C in pure Python (``compat/tensorflow_stub/
pywrap_tensorflow.py``, ``masked_crc32c``: 0.7 MB/s here) and keeps every event it loads as a Python
object, so a 90 MB event file held a request for minutes and a worker past 2.8 GB. The framing and
checksums are the same here (``PyRecordReader_New.GetNext``: an 8-byte little-endian length, its masked
CRC-32C, the record, the record's masked CRC-32C), the checksums computed with numpy over many records at
once; what an event means is TensorBoard's (its protos and ``tensor_util``).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from data.config import ReadLimits, read_limits

READ_BYTES = 8 << 20  # bytes read from an event file at a time
BATCH = 4096  # records whose checksums are checked together
# A record longer than this is no scalar (an image, a graph): it is passed over unread. (Its checksum is
# not checked, so its bytes are never held; its length's is.)
MAX_SCALAR_RECORD = 1 << 20
MAX_STEP = 1 << 62  # as data.trainer_logs.read.MAX_STEP: steps are int64 wherever they are compared
SCALARS_PLUGIN = "scalars"  # tensorboard/plugins/scalar/metadata.py PLUGIN_NAME


def _crc_table() -> np.ndarray:
    poly = 0x82F63B78  # CRC-32C (Castagnoli), reflected
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(poly), table >> 1).astype(np.uint32)
    return table


_TABLE = _crc_table()


def masked_crc32c(rows: np.ndarray) -> np.ndarray:
    """TensorBoard's ``masked_crc32c`` of each row of ``rows`` (``n x length`` uint8), at once."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _TABLE[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> 8)
    crc ^= np.uint32(0xFFFFFFFF)
    return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


def _first_bad(heads: list[bytes], head_crcs: list[int], datas: list[bytes], data_crcs: list[int]) -> int:
    """The index of the first record of a batch whose length or data fails its checksum (len: none)."""
    n = len(heads)
    bad = n
    got = masked_crc32c(np.frombuffer(b"".join(heads), dtype=np.uint8).reshape(n, 8))
    wrong = np.nonzero(got != np.array(head_crcs, dtype=np.uint32))[0]
    if wrong.size:
        bad = int(wrong[0])
    by_len: dict[int, list[int]] = {}
    for i in range(bad):
        by_len.setdefault(len(datas[i]), []).append(i)
    for length, idx in by_len.items():
        if length == 0:
            rows = np.zeros((len(idx), 0), dtype=np.uint8)
        else:
            rows = np.frombuffer(b"".join(datas[i] for i in idx), dtype=np.uint8).reshape(len(idx), length)
        wrong = np.nonzero(masked_crc32c(rows) != np.array([data_crcs[i] for i in idx], dtype=np.uint32))[0]
        if wrong.size:
            bad = min(bad, idx[int(wrong[0])])
    return bad


class Damaged(Exception):
    """An event file whose record fails its checksum: what came before it is kept."""


def records(path: Path) -> Iterator[bytes]:
    """The records of one event file, each checked, in order. A record cut short at the end (a file still
    being written) ends it quietly; one that fails its checksum raises :class:`Damaged` after the records
    before it."""
    heads: list[bytes] = []
    head_crcs: list[int] = []
    datas: list[bytes] = []
    data_crcs: list[int] = []

    def checked() -> Iterator[bytes]:
        bad = _first_bad(heads, head_crcs, datas, data_crcs)
        yield from datas[:bad]
        if bad < len(heads):
            raise Damaged(f"record {count - len(heads) + bad + 1:,} fails its checksum")
        heads.clear(), head_crcs.clear(), datas.clear(), data_crcs.clear()

    count = 0
    with open(path, "rb") as f:
        buf, off = f.read(READ_BYTES), 0
        while True:
            if len(buf) - off < 12:
                buf, off = buf[off:] + f.read(READ_BYTES), 0
                if len(buf) < 12:
                    break
            (length,), (head_crc,) = (
                struct.unpack_from("<Q", buf, off),
                struct.unpack_from("<I", buf, off + 8),
            )
            count += 1
            if length > MAX_SCALAR_RECORD:  # passed over: its length checked alone, its bytes never read
                yield from checked()
                head = np.frombuffer(buf[off : off + 8], dtype=np.uint8).reshape(1, 8)
                if int(masked_crc32c(head)[0]) != head_crc:
                    raise Damaged(f"record {count:,} fails its checksum")
                skip = 12 + length + 4 - (len(buf) - off)
                if skip > 0:
                    f.seek(skip, 1)
                    buf, off = f.read(READ_BYTES), 0
                else:
                    off += 12 + length + 4
                continue
            need = 12 + length + 4
            if len(buf) - off < need:
                buf, off = buf[off:] + f.read(max(READ_BYTES, need)), 0
                if len(buf) < need:
                    break  # cut short: being written
            heads.append(buf[off : off + 8])
            head_crcs.append(head_crc)
            datas.append(buf[off + 12 : off + 12 + length])
            data_crcs.append(struct.unpack_from("<I", buf, off + 12 + length)[0])
            off += need
            if len(heads) >= BATCH:
                yield from checked()
    yield from checked()


@dataclass
class Scalars:
    """The scalar points read of a folder's event files: per tag its steps and values (compact arrays),
    the points read, and notes on what was left out."""

    tags: dict[str, tuple[array, array]] = field(default_factory=dict)
    points: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, tag: str, step: int, value: float) -> None:
        steps, values = self.tags.get(tag) or self.tags.setdefault(tag, (array("q"), array("d")))
        steps.append(step)
        values.append(value)
        self.points += 1


def read_scalars(folder: Path, rel: str, names: list[str], limits: ReadLimits | None = None) -> Scalars:
    """The scalar points of the event files ``names`` in ``folder`` (read in that order). A scalar is a
    legacy ``simple_value`` (``torch.utils.tensorboard``, tensorboardX, TF1) or a one-element numeric
    tensor of a tag whose metadata names the ``scalars`` plugin (TF2's ``tf.summary.scalar``, which writes
    the metadata with a tag's first value only); TensorBoard reads both as scalars
    (``data_compat.migrate_value``). At most ``limits.tensorboard_points`` points are read; the rest is
    refused with a note naming the setting."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    cap = (limits or read_limits()).tensorboard_points
    out = Scalars()
    plugins: dict[str, str] = {}
    bad_steps = bad_points = 0
    for name in names:
        try:
            for raw in records(folder / name):
                try:
                    ev = event_pb2.Event.FromString(raw)
                except Exception as e:  # noqa: BLE001 - protobuf's DecodeError: the file is damaged there
                    raise Damaged(f"a record is no event ({type(e).__name__})") from e
                if not ev.HasField("summary"):
                    continue
                if not -MAX_STEP <= ev.step <= MAX_STEP:
                    bad_steps += 1
                    continue
                for v in ev.summary.value:
                    kind = v.WhichOneof("value")
                    if v.HasField("metadata") and v.metadata.plugin_data.plugin_name:
                        plugins[v.tag] = v.metadata.plugin_data.plugin_name
                    if kind == "simple_value":
                        out.add(v.tag, ev.step, float(v.simple_value))
                    elif kind == "tensor" and plugins.get(v.tag) == SCALARS_PLUGIN:
                        try:  # a dtype TensorBoard does not know, or contents that do not fit the shape
                            arr = tensor_util.make_ndarray(v.tensor)
                        except Exception:  # noqa: BLE001 - TypeError, KeyError, ValueError: a bad proto's
                            bad_points += 1
                            continue
                        if arr.size == 1 and np.issubdtype(arr.dtype, np.complexfloating):
                            bad_points += 1
                        elif arr.size == 1 and np.issubdtype(arr.dtype, np.number):
                            out.add(v.tag, ev.step, float(arr.reshape(-1)[0]))
                if out.points >= cap:
                    out.notes.append(
                        f"{rel}: TensorBoard events read up to {cap:,} scalar points, the limit "
                        f"({ReadLimits.NAMES['tensorboard_points']}); the rest was not read."
                    )
                    return _with_steps_note(out, rel, bad_steps, bad_points)
        except Damaged as e:
            out.notes.append(f"{rel}/{name}: TensorBoard events damaged ({e}); read up to there.")
        except OSError as e:
            out.notes.append(f"{rel}/{name}: not read ({type(e).__name__}: {e}).")
    return _with_steps_note(out, rel, bad_steps, bad_points)


def _with_steps_note(out: Scalars, rel: str, bad_steps: int, bad_points: int = 0) -> Scalars:
    if bad_steps:
        out.notes.append(f"{rel}: {bad_steps} events with a step beyond ±2^62 were left out.")
    if bad_points:
        out.notes.append(f"{rel}: {bad_points} scalar points that are not readable numbers were left out.")
    return out
