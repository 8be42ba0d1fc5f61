"""prime-rl's chunked trace stream and its annotations, laid out as its file monitor writes them, read back
response by response and compared field by field with the records read here with json and folded by the test's
own rule.

Source read: PrimeIntellect-ai/prime-rl (the stored versions of these files; the mirror's snapshot of
2026-08-21 predates the stream):
- src/prime_rl/monitors/file/monitor.py (commit 048a6e23428ea9b47feaba3c9fa75376e89a383e) ``log_episodes``:
  only subset "all", each ``episode.to_record()`` appended with ``orjson.dumps(record, default=str,
  option=OPT_APPEND_NEWLINE | OPT_SERIALIZE_NUMPY)`` to the trace stream and an ``index_row`` to its index
  (stream flushed first); ``log_annotations``: each update appended to ``annotations/{producer}/`` and
  ``update_index_row`` to ``annotations/{producer}.index.jsonl``;
- src/prime_rl/monitors/file/traces/chunks.py (551bfc39ba61d9f0aec59780d4a3d7e5395f1fdc): ``chunk_path`` =
  ``{number:05d}.jsonl``; ``seal``: ``{number:05d}.jsonl.zst`` in seekable zstd frames (``FRAME_BYTES`` 4 MiB),
  the plain file removed; a line never spans chunks;
- src/prime_rl/monitors/file/traces/index.py (13e96a1254e9eae2564a5b6985ac5ada32ae0cc4) ``index_row``:
  ``line``, ``offset``, ``id``, ``kind``, ``trace_ids``, …, ``chunk``;
- src/prime_rl/monitors/file/traces/update.py (65a185848115523d2feb2e110d04d05cfbea3a08) ``make_update`` =
  ``{"version": 1, "trace_id", "info", "branches": [{"index", **streams}]}``, ``STREAM_FIELDS`` =
  advantages, trainer_logprobs, entropies, is_masked, ``update_index_row`` = ``{trace_id, chunk, offset,
  info}``, ``fold_trace_updates`` (streams over the branch's whole token prefix, taken at the nodes' mask);
- src/prime_rl/trainer/rl/annotations.py (65a18584…) ``AnnotationWriter.export``: trainer_logprobs and
  entropies null outside the loss mask and at the first position, is_masked True / False / None;
- the layout under ``<run>/monitors/file/traces/`` (stream/, stream.index.jsonl, annotations/{producer}/,
  {producer}.index.jsonl, live/) as monitors/file/traces/__init__.py lays it out (cited from its line 13-30
  by a design note of the same repository's stream; the module itself is not in the store);
- the seekable zstd format (facebook/zstd contrib/seekable_format): zstd frames then a skippable seek table.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import zstandard

from data.ingest import ingest_run
from data.store import open_store, sample_id
from data.store.runs import run_file_stats
from tests.unit.ingest.test_dialect_prime_rl import _episode, _node, _trace

PADS = ("<pad>",)
TRACES = "monitors/file/traces"


def _dumps(record: dict) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def _answer(trace_id: str, answer_ids: list[int], logprobs: list[float]) -> dict:
    """system (2 tokens), user (3), then the model's node: 2 scaffold tokens (mask false) and the answer."""
    n = len(answer_ids)
    nodes = [
        _node(None, {"role": "system", "content": "Be brief."}, tokens=[1, 2], mask=[False, False]),
        _node(0, {"role": "user", "content": "2+2?"}, tokens=[3, 4, 5], mask=[False] * 3),
        _node(1, {"role": "assistant", "content": "4"}, sampled=True, tokens=[9, 9, *answer_ids],
              mask=[False, False] + [True] * n, logprobs=logprobs),
    ]  # fmt: skip
    return _trace(nodes, {"correct": {"score": 1.0, "weight": 1.0}}) | {"id": trace_id}


def _seekable(data: bytes, frame: int = 64) -> bytes:
    """``data`` as a seekable zstd file: frames of ``frame`` bytes, then the seek table's skippable frame."""
    c = zstandard.ZstdCompressor(level=3)
    frames = [c.compress(data[i : i + frame]) for i in range(0, len(data), frame)]
    sizes = [(len(f), len(data[i * frame : (i + 1) * frame])) for i, f in enumerate(frames)]
    table = b"".join(struct.pack("<II", a, b) for a, b in sizes) + struct.pack(
        "<IBI", len(frames), 0, 0x8F92EAB1
    )
    return b"".join(frames) + struct.pack("<II", 0x184D2A5E, len(table)) + table


def _layout(run: Path) -> dict:
    """Chunk 0 sealed (episode A: trace tA), chunk 1 live (episode B: trace tB, episode C: trace tC, never
    annotated), the stream index, and two producers' annotations: the trainer's for tA and tB, the
    orchestrator's advantages for tA. Returns the annotation streams by trace, to fold by hand."""
    traces = run / TRACES
    eps = [
        _episode([_answer("tA", [40, 41], [-0.5, -0.25])], step=4, group="gA") | {"id": "A"},
        _episode([_answer("tB", [42], [-2.0])], step=5, group="gB") | {"id": "B"},
        _episode([_answer("tC", [43], [-1.0])], step=5, group="gC") | {"id": "C"},
    ]
    chunk0, chunk1 = _dumps(eps[0]), _dumps(eps[1]) + _dumps(eps[2])
    (traces / "stream").mkdir(parents=True)
    (traces / "stream" / "00000.jsonl.zst").write_bytes(_seekable(chunk0))
    (traces / "stream" / "00001.jsonl").write_bytes(chunk1)
    index = [
        {"line": 1, "offset": 0, "id": "A", "kind": "train", "trace_ids": ["tA"], "chunk": 0},
        {"line": 2, "offset": 0, "id": "B", "kind": "train", "trace_ids": ["tB"], "chunk": 1},
        {
            "line": 3,
            "offset": len(_dumps(eps[1])),
            "id": "C",
            "kind": "train",
            "trace_ids": ["tC"],
            "chunk": 1,
        },
    ]
    (traces / "stream.index.jsonl").write_bytes(b"".join(_dumps(r) for r in index))
    # The branch's token prefix: 2 + 3 + 2 scaffold + the answer; sampled at 7, 8 (tA) and 7 (tB).
    streams = {
        "tA": {"trainer_logprobs": [None] * 7 + [-0.4, -0.3], "entropies": [None] * 7 + [1.5, 0.5],
               "is_masked": [None] * 7 + [False, True], "advantages": [0.0] * 7 + [2.0, 2.0]},
        "tB": {"trainer_logprobs": [None] * 7 + [-2.5], "entropies": [None] * 7 + [0.25],
               "is_masked": [None] * 7 + [False]},
    }  # fmt: skip
    updates = {
        "trainer": [
            {
                "version": 1,
                "trace_id": t,
                "info": {},
                "branches": [{"index": 0, **{k: v for k, v in s.items() if k != "advantages"}}],
            }
            for t, s in streams.items()  # fmt: skip
        ],
        "orch": [
            {
                "version": 1,
                "trace_id": "tA",
                "info": {"effective": True, "advantage": 2.0},
                "branches": [{"index": 0, "advantages": streams["tA"]["advantages"]}],
            },
        ],  # fmt: skip
    }
    for producer, ups in updates.items():
        folder = traces / "annotations" / producer
        folder.mkdir(parents=True)
        lines = [_dumps(u) for u in ups]
        (folder / "00000.jsonl").write_bytes(b"".join(lines))
        offsets = [sum(map(len, lines[:i])) for i in range(len(lines))]
        rows = [
            {"trace_id": u["trace_id"], "chunk": 0, "offset": o, "info": u["info"]}
            for u, o in zip(ups, offsets, strict=True)
        ]
        (traces / "annotations" / f"{producer}.index.jsonl").write_bytes(b"".join(_dumps(r) for r in rows))
    (traces / "live").mkdir()
    (traces / "live" / "tD.jsonl").write_bytes(
        _dumps({"open": {"trace": "tD"}, "dispatch": {"kind": "train"}})
    )
    (run / "monitors" / "file" / "metrics.jsonl").write_bytes(_dumps({"step": 4, "time": 1.0, "loss": 0.1}))
    return streams


def test_prime_rl_stream001_chunks_and_annotations(tmp_path):
    """The sealed and the live chunk are read (3 responses, steps from run.work.step, not the chunk numbers);
    the index, the annotations, the live traces and metrics.jsonl are side files, not bad lines; each
    response's per-token fields are its trace's annotation streams at its sampled positions (7, 8 of the
    prefix), compared field by field: trainer_logprobs become logprobs (the sampler's inference_logprobs),
    entropies, advantages, is_masked as 1 / 0; trace tC, never annotated, keeps the sampler's log-probs."""
    run = tmp_path / "run"
    streams = _layout(run)
    aside: list[tuple[str, str]] = []
    read = [rel for rel, _ in run_file_stats(run, aside=aside)]
    assert read == [f"{TRACES}/stream/00000.jsonl.zst", f"{TRACES}/stream/00001.jsonl"]
    assert len(aside) == 7  # the index, 2 annotation chunks and 2 indexes, the live trace, metrics.jsonl
    res = ingest_run(run, tmp_path / "c", PADS)
    store = open_store(res.store_dir)
    assert (res.samples, res.bad_lines) == (3, 0)
    rows = _rows(store)
    a = rows[sample_id(f"{TRACES}/stream/00000.jsonl.zst", 1) + ".0"]
    b = rows[sample_id(f"{TRACES}/stream/00001.jsonl", 1) + ".0"]
    c = rows[sample_id(f"{TRACES}/stream/00001.jsonl", 2) + ".0"]
    assert (a["step"], b["step"], c["step"]) == (4, 5, 5)
    at = {"tA": [7, 8], "tB": [7]}
    for got, trace, sampler in ((a, "tA", [-0.5, -0.25]), (b, "tB", [-2.0])):
        s = streams[trace]
        assert got["logprobs"] == pytest.approx([s["trainer_logprobs"][i] for i in at[trace]], rel=1e-6)
        assert got["inference_logprobs"] == sampler
        assert got["entropies"] == [s["entropies"][i] for i in at[trace]]
        assert got["is_masked"] == [float(s["is_masked"][i]) for i in at[trace]]
    assert a["advantages"] == [2.0, 2.0] and b["advantages"] is None
    assert a["logprobs"] == pytest.approx([-0.4, -0.3], rel=1e-6) and a["is_masked"] == [0.0, 1.0]  # by hand
    assert c["logprobs"] == [-1.0] and c["inference_logprobs"] is None and c["entropies"] is None
    said = " ".join(store.manifest.problems)
    assert "Joined 2 of 3 lines' keys in 2 files" in said


def test_prime_rl_stream002_later_annotations_read_again(tmp_path):
    """Annotations that arrive after a chunk was read (the trainer trains on tC later) make that chunk read
    again and its response joined; the sealed chunk, whose traces got nothing new, is not read again, and
    its stamp (the sizes of the indexes) is recorded anew so that the next look reads no index."""
    run = tmp_path / "run"
    _layout(run)
    first = open_store(ingest_run(run, tmp_path / "c", PADS).store_dir).manifest.files
    trainer = run / TRACES / "annotations" / "trainer"
    update = {"version": 1, "trace_id": "tC", "info": {},
              "branches": [{"index": 0, "trainer_logprobs": [None] * 7 + [-1.25], "entropies": [None] * 7 + [0.75]}]}  # fmt: skip
    size = (trainer / "00000.jsonl").stat().st_size
    with open(trainer / "00000.jsonl", "ab") as f:
        f.write(_dumps(update))
    with open(run / TRACES / "annotations" / "trainer.index.jsonl", "ab") as f:
        f.write(_dumps({"trace_id": "tC", "chunk": 0, "offset": size, "info": {}}))
    before = open_store(ingest_run(run, tmp_path / "c", PADS).store_dir)
    c = _rows(before)[sample_id(f"{TRACES}/stream/00001.jsonl", 2) + ".0"]
    assert c["logprobs"] == [-1.25] and c["inference_logprobs"] == [-1.0] and c["entropies"] == [0.75]
    sealed = before.manifest.files[f"{TRACES}/stream/00000.jsonl.zst"]
    live = before.manifest.files[f"{TRACES}/stream/00001.jsonl"]
    assert sealed["companion"]["joined"] == 1 and live["companion"]["joined"] == 2
    assert sealed["parts"] == first[f"{TRACES}/stream/00000.jsonl.zst"]["parts"]  # not read again
    # Its stamp (the indexes' sizes) is brought up to date, so the next look computes no signature.
    sizes = [
        (run / TRACES / n).stat().st_size for n in ("stream.index.jsonl", "annotations/orch.index.jsonl")
    ]
    assert [size for _, size in sealed["companion"]["stamp"]][:2] == sizes
    assert sealed["companion"]["stamp"] == live["companion"]["stamp"]
    assert live["parts"] != first[f"{TRACES}/stream/00001.jsonl"]["parts"]  # read again


def _rows(store) -> dict:
    return {r["sample_id"]: r for r in store.scan_parts().collect().iter_rows(named=True)}
