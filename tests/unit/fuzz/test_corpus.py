"""Last round's hostile corpus (issue 20: "10,091 good lines all kept and 42 bad ones all reported"), built
on the fly: 42 kinds of unusable line among 10,091 good ones in a plain, a CRLF-with-BOM, a .gz and a .zst
file; every good line kept, every bad line reported with a reason (issue 33's done-when)."""

from __future__ import annotations

import gzip
import json
import random

import zstandard

from data.ingest import ingest_run
from data.store import open_store


def _rec(**kw) -> bytes:
    d = {"prompt": "p", "response": "r", "reward": 1.0, "step": 1}
    d.update(kw)
    return json.dumps({k: v for k, v in d.items() if v is not ...}).encode()


# One line of each kind, as bytes without its newline.
BAD = {
    "cut short": b'{"prompt": "p", "response": "r", "reward": 1.0, "step": 1',
    "trailing comma": b'{"prompt": "p", "response": "r", "reward": 1.0, "step": 1,}',
    "single quotes": b"{'prompt': 'p', 'response': 'r', 'reward': 1.0, 'step': 1}",
    "a bare word": b"hello",
    "a comment": b"// a comment",
    "a lone brace": b"}",
    "text after the object": _rec() + b' {"x": 1}',
    "invalid UTF-8 outside a string": b'{"prompt": "p", \xff "response": "r"}',
    "a NUL byte": b"\x00",
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
    "an array": b"[1, 2]",
    "a string": b'"text"',
    "a number": b"42",
    "null": b"null",
    "true": b"true",
    "an empty object": b"{}",
    "no prompt": _rec(prompt=...),
    "no response": _rec(response=...),
    "no reward": _rec(reward=...),
    "no step": _rec(step=...),
    "a null prompt": _rec(prompt=None),
    "a null reward": _rec(reward=None),
    "a text reward": _rec(reward="high"),
    "a list reward": _rec(reward=[1.0]),
    "an object reward": _rec(reward={"a": 1}),
    "a text step": _rec(step="three"),
    "a fractional step": _rec(step=2.5),
    "a NaN step": _rec(step=float("nan")),
    "an infinite step": _rec(step=float("inf")),
    "a step past 2^63": _rec(step=2**64),
    "a step below -2^63": _rec(step=-(2**63) - 1),
    "a true step": _rec(step=True),
    "a number prompt": _rec(prompt=5),
    "a list of numbers as prompt": _rec(prompt=[1, 2]),
    "an object prompt": _rec(prompt={"a": 1}),
    "a number response": _rec(response=5.5),
    "log-probs as texts": _rec(logprobs=["a", "b"]),
    "log-probs as a text": _rec(logprobs="0.1,0.2"),
    "reference log-probs as an object": _rec(ref_logprobs={"a": 1.0}),
    "token rewards as a text": _rec(token_rewards="1"),
    "tokens as numbers": _rec(response_tokens=[1, 2]),
    "a text reference reward": _rec(ref_reward="0.5"),
}
GOOD = 10_091


def _good(i: int) -> bytes:
    return _rec(
        prompt=f"prompt {i % 97}", response=f"response {i} \u00e9\U0001f600", reward=i / 7, step=i // 64
    )


def test_corpus001_42_kinds_of_bad_line_reported_and_every_good_line_kept(tmp_path):
    """42 kinds of unusable line (invalid JSON of many shapes, lines that are no object, missing fields,
    every field of the wrong type, steps out of range) spread at random places among 10,091 good lines in
    four files (plain, CRLF with a BOM, .gz, .zst): each good line is a row, each bad line one error with a
    reason, at its file and line, whichever path (whole chunk or line by line) read its neighbours."""
    assert len(BAD) == 42
    rng = random.Random(20)
    files = {"plain.jsonl": [], "crlf.jsonl": [], "packed.jsonl.gz": [], "packed.jsonl.zst": []}
    names = list(files)
    for i in range(GOOD):
        files[names[i % 4]].append(("good", _good(i)))
    for kind, raw in BAD.items():
        lines = files[rng.choice(names)]
        lines.insert(rng.randrange(len(lines) + 1), (kind, raw))
    run = tmp_path / "run"
    run.mkdir()
    want_bad, want_good = {}, set()
    for name, lines in files.items():
        end = b"\r\n" if name == "crlf.jsonl" else b"\n"
        data = (b"\xef\xbb\xbf" if name == "crlf.jsonl" else b"") + b"".join(raw + end for _, raw in lines)
        if name.endswith(".gz"):
            data = gzip.compress(data)
        elif name.endswith(".zst"):
            data = zstandard.ZstdCompressor().compress(data)
        (run / name).write_bytes(data)
        for n, (kind, _) in enumerate(lines, start=1):
            if kind == "good":
                want_good.add((name, n))
            else:
                want_bad[(name, n)] = kind
    store = open_store(ingest_run(run, tmp_path / "cache", ("<pad>",)).store_dir)
    kept = set(store.scalars().select("source", "line").iter_rows())
    assert len(kept) == GOOD and kept == want_good
    errors = {
        (r["source"], r["line"]): r["reason"]
        for r in store.issues().iter_rows(named=True)
        if r["severity"] == "error"
    }
    unreported = {kind for where, kind in want_bad.items() if where not in errors}
    assert unreported == set(), unreported
    assert set(errors) == set(want_bad) and all(errors.values())
