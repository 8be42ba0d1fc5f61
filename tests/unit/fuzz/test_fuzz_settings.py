"""Fuzzing rlboard.toml and the bounded settings reader (data/untrusted.py; data/ingest/options.py, where
rlboard.toml and the trainer's log of reward functions are read for a run): generated TOML and raw bytes,
nested deep, with odd weights and paths; read or reported, never an uncaught error (issue 33, item 7)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data import untrusted
from data.config import MAX_REWARD_WEIGHT
from data.ingest.options import load_options
from tests.unit.fuzz.budget import BASE_BYTES, assert_bounded, budget, peak_bytes
from tests.unit.fuzz.test_fuzz_records import SCALARS, VALUES

DIALECT_NAMES = ["contract", "trl", "verl", "nemo_rl", "nemo_gym", "verifiers", "openrlhf"]


def _toml_value(v) -> str:
    """A Python value as TOML (floats' inf and nan as TOML spells them), or a literal TOML does not have."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)  # past 64 bits TOML refuses it
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return "null"  # not TOML


WEIGHTS = st.one_of(
    st.floats(),
    st.integers(-(2**65), 2**65),
    st.sampled_from([1.0, 0.5, 1e6, 1e7, -1e300, float("inf"), float("nan")]),
    SCALARS,
)
PATHS = st.sampled_from(
    ["tokenizer.json", "../tokenizer.json", "/etc/passwd", "", ".", "loop", "sub/../t.json"]
)


@st.composite
def run_files(draw) -> str:
    """An rlboard.toml's text: its keys (dialect, reward_weights as a table or inline, tokenizer, [fields])
    with values of any type, junk lines, deep nesting."""
    lines = []
    if draw(st.booleans()):
        lines.append(f"dialect = {_toml_value(draw(st.one_of(st.sampled_from(DIALECT_NAMES), SCALARS)))}")
    if draw(st.booleans()):
        lines.append(f"tokenizer = {_toml_value(draw(st.one_of(PATHS, SCALARS)))}")
    weights = draw(st.dictionaries(st.text(max_size=6), WEIGHTS, max_size=4))
    how = draw(st.sampled_from(["table", "inline", "value", "none"]))
    if how == "inline":
        lines.append(f"reward_weights = {_toml_value(weights)}")
    elif how == "value":
        lines.append(f"reward_weights = {_toml_value(draw(VALUES))}")
    elif how == "table":
        lines.append("[reward_weights]")
        lines += [f"{json.dumps(k)} = {_toml_value(w)}" for k, w in weights.items()]
    if draw(st.booleans()):
        lines.append("[fields]")
        lines += [
            f"{k} = {_toml_value(draw(st.one_of(st.text(max_size=10), SCALARS)))}" for k in ("prompt", "step")
        ]
    if draw(st.booleans()):
        depth = draw(st.sampled_from([2, 63, 64, 65, 5000]))
        lines.append("deep = " + "[" * depth + "]" * depth)
    if draw(st.booleans()):
        lines.append(draw(st.text(max_size=30)))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    run = tmp_path_factory.mktemp("warm")
    (run / "rlboard.toml").write_text('dialect = "trl"\n')
    load_options(run)


def _history(draw) -> str:
    """A TRL log history whose reward is some weighted sum of its functions' means, or nothing like it."""
    names = draw(st.lists(st.sampled_from(["acc", "fmt", "len"]), unique=True, min_size=1, max_size=3))
    entries = []
    for step in range(draw(st.integers(0, 6))):
        means = {f"rewards/{n}/mean": draw(st.one_of(st.floats(-10, 10), WEIGHTS)) for n in names}
        reward = draw(st.one_of(st.just(sum(v for v in means.values() if isinstance(v, float))), WEIGHTS))
        entries.append({"step": step, "reward": reward, **means})
    return json.dumps({"log_history": entries}, allow_nan=True)


@budget(60)
@given(text=st.one_of(run_files(), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))), st_=st.data())
def test_fuzz007_rlboard_toml_is_read_or_its_problem_said(tmp_path_factory, text, st_):
    """load_options on a run folder with a fuzzed rlboard.toml (and maybe a TRL log history to fit weights
    to): never raises; every problem is a text; the weights it takes are finite and within the limit; a
    tokenizer it takes lies in the run folder; memory bounded by the file's size."""
    run = tmp_path_factory.mktemp("fuzz007")
    (run / "rlboard.toml").write_bytes(text.encode("utf-8", "surrogatepass"))
    if st_.draw(st.booleans()):
        (run / "trainer_state.json").write_text(_history(st_.draw))
    if st_.draw(st.booleans()):
        (run / "tokenizer.json").write_bytes(
            st_.draw(st.sampled_from([b"{}", b"not json", b'{"model": {}}']))
        )
    if st_.draw(st.booleans()):
        (run / "loop").symlink_to("loop")
    opts, peak = peak_bytes(load_options, run)
    assert all(isinstance(p, str) and p for p in opts.problems)
    for name, w in (opts.reading.reward_weights or {}).items():
        assert isinstance(name, str) and math.isfinite(w) and abs(w) <= MAX_REWARD_WEIGHT, (name, w)
    if opts.reading.tokenizer is not None:
        assert Path(opts.reading.tokenizer).resolve().is_relative_to(run.resolve())
    assert_bounded(peak, BASE_BYTES + 64 * len(text.encode("utf-8", "surrogatepass")), "rlboard.toml")


def _depth(text: bytes) -> int:
    """The deepest nesting of brackets, counted the plain way (a closing bracket at depth 0 is ignored)."""
    depth = deepest = 0
    for c in text:
        if c in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in b"]}" and depth:
            depth -= 1
    return deepest


@budget(200)
@given(
    text=st.one_of(st.binary(max_size=200), st.text(alphabet='[]{}a"', max_size=300).map(str.encode)),
    limit=st.integers(0, 300),
)
def test_fuzz008_the_bounded_reader_and_the_depth_check(tmp_path_factory, text, limit):
    """read_bounded gives a file's bytes when it is within the limit, and refuses it (Refused, saying the
    limit) otherwise; nesting_depth agrees with a plain count up to the limit and says "over" past it."""
    root = tmp_path_factory.mktemp("fuzz008")
    (root / "settings").write_bytes(text)
    if len(text) <= limit:
        assert untrusted.read_bounded(root / "settings", limit, root=root) == text
    else:
        with pytest.raises(untrusted.Refused, match=f"over the limit of {limit:,}"):
            untrusted.read_bounded(root / "settings", limit, root=root)
    depth = _depth(text)
    got = untrusted.nesting_depth(text, limit)
    assert got == depth if depth <= limit else got == limit + 1
