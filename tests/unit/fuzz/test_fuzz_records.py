"""Fuzzing each dialect's record mapping (data/schema/record.py, data/schema/dialects/*) and the parsing of a
chunk of lines (data/ingest/blocks.py's parse_chunk: Polars' path and the line-by-line one): every line is
read or reported, exactly once, and never raises (issue 33, item 7)."""

from __future__ import annotations

import copy
import json

from hypothesis import given
from hypothesis import strategies as st

from data import schema
from data.ingest.blocks import parse_chunk
from data.ingest.slow import _line_by_line
from data.schema.contract import INT64_MAX, INT64_MIN
from data.schema.dialects import DIALECTS as ALL_DIALECTS
from tests.unit.fuzz.budget import BASE_BYTES, SCALARS, assert_bounded, budget, json_values, peak_bytes

# Every name a dialect reads: the contract's fields and their aliases in each dialect, and the keys the
# dialects' own mappings look into (chat messages, NeMo-RL's batch of one, NeMo Gym's Responses API items).
KEYS = sorted(
    {k for d in ALL_DIALECTS for canon, alts in d.aliases.items() for k in (canon, *alts)}
    | set(schema.CANONICAL)
    | {
        "messages", "role", "content", "type", "text", "tool_calls", "name", "arguments", "output",
        "summary", "input", "instructions", "usage", "output_tokens", "output_tokens_details",
        "reasoning_tokens", "model", "status", "responses_create_params", "idx", "token_ids",
        "prev_logprobs", "generation_logprobs", "advantages", "token_loss_mask", "input_lengths",
        "example_id", "completion", "ground_truth", "a.b", "a", "b", "", "line", "__item",
    }
)  # fmt: skip
NAMES = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
VALUES = json_values(NAMES)
MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "environment", 3])},
        optional={"content": st.one_of(st.text(max_size=10), VALUES)},
    ),
    max_size=4,
)
DIALECTS = st.sampled_from(ALL_DIALECTS)


@st.composite
def records(draw):
    """A record near the contract (its four fields, each maybe of the wrong type), with the fields of
    other trainers' shapes and random ones beside."""
    rec = {}
    if draw(st.booleans()):
        rec = {
            "prompt": draw(st.one_of(st.text(max_size=12), MESSAGES, SCALARS)),
            "response": draw(st.one_of(st.text(max_size=12), MESSAGES, SCALARS)),
            "reward": draw(SCALARS),
            "step": draw(st.one_of(st.integers(-3, 5), SCALARS)),
        }
    rec.update(draw(st.dictionaries(NAMES, st.one_of(VALUES, MESSAGES), max_size=6)))
    if draw(st.booleans()):  # NeMo-RL logs each line as a batch of one
        rec = {k: [v] for k, v in rec.items()}
    return rec


def _line(draw_rec, how: str) -> bytes:
    text = json.dumps(draw_rec, ensure_ascii=how == "ascii", allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def lines(draw):
    """A chunk's lines: JSON of records, a record cut short, raw bytes, blank lines."""
    out = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["record", "record", "record", "cut", "bytes", "blank", "other"]))
        if kind == "record":
            out.append(_line(draw(records()), draw(st.sampled_from(["ascii", "utf8"]))))
        elif kind == "cut":
            raw = _line(draw(records()), "utf8")
            out.append(raw[: draw(st.integers(0, len(raw)))])
        elif kind == "bytes":
            out.append(draw(st.binary(max_size=40)).replace(b"\n", b" "))
        elif kind == "blank":
            out.append(draw(st.sampled_from([b"", b" ", b"\t", b"\r"])).rstrip(b"\r"))
        else:
            out.append(_line(draw(VALUES), "utf8"))
    return out


def _accounted(lines: list[bytes], result, first: int) -> dict[int, str]:
    """Each line's fate: ``kept`` (a row), ``reported`` (an error), absent for a blank line; asserted to be
    exactly one of them."""
    kept = result.frame.get_column("line").to_list() if result.frame.height else []
    errors = [i["line"] for i in result.issues if i["severity"] == "error"]
    assert len(kept) == len(set(kept)) and len(errors) == len(set(errors)), (kept, errors)
    assert not set(kept) & set(errors), (kept, errors)
    fate = {ln: "kept" for ln in kept} | {ln: "reported" for ln in errors}
    for n, raw in enumerate(lines, start=first):
        assert (n in fate) == bool(raw.strip()), (n, raw, fate.get(n))
    for issue in result.issues:
        assert isinstance(issue["reason"], str) and issue["reason"], issue
    return fate


@budget(100)
@given(dialect=DIALECTS, obj=st.one_of(records(), VALUES), step=st.one_of(st.none(), st.integers(0, 2**63)))
def test_fuzz001_each_dialect_maps_a_record_or_says_why_not(dialect, obj, step):
    """validate_record under every dialect: a record onto the contract's types (text, a float reward, an
    int64 step) or BadLine with a reason; never another exception."""
    notes: list[str] = []
    try:
        rec, ignored = schema.validate_record(copy.deepcopy(obj), step, notes, dialect, schema.Reading())
    except schema.BadLine as e:
        assert isinstance(e.reason, str) and e.reason
        return
    assert isinstance(rec["prompt"], str) and isinstance(rec["response"], str)
    assert isinstance(rec["reward"], float)
    assert isinstance(rec["step"], int) and INT64_MIN <= rec["step"] <= INT64_MAX
    assert all(isinstance(n, str) for n in notes) and all(isinstance(k, str) for k in ignored)


@budget(40)
@given(dialect=DIALECTS, chunk=lines(), step=st.one_of(st.none(), st.integers(0, 100)))
def test_fuzz002_every_line_of_a_chunk_is_kept_or_reported(dialect, chunk, step):
    """parse_chunk (Polars first, then line by line): each non-blank line is a row or an error, exactly
    once; a blank line is neither; no exception; Python memory bounded by the chunk's size."""
    result, peak = peak_bytes(parse_chunk, chunk, 1, step=step, dialect=dialect, reading=schema.Reading())
    _accounted(chunk, result, 1)
    assert_bounded(peak, BASE_BYTES + 200 * sum(map(len, chunk)), "parse_chunk")


@budget(40)
@given(dialect=DIALECTS, chunk=lines())
def test_fuzz003_a_line_is_kept_whichever_path_reads_it(dialect, chunk):
    """One rule whichever path reads a line (issue 20, item 9): the lines Polars' path keeps are the lines
    the line-by-line path keeps, alone."""
    chunk = [raw for raw in chunk if raw.strip()]
    if not chunk:
        return
    whole = _accounted(chunk, parse_chunk(chunk, 1, dialect=dialect), 1)
    plain = [b"NaN" not in raw and b"Infinity" not in raw for raw in chunk]
    alone = _accounted(chunk, _line_by_line(chunk, list(range(1, len(chunk) + 1)), plain, None, dialect), 1)
    assert whole == alone
