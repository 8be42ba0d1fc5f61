"""The drifting-tokens board on the real TRL GRPO fixture against a hand computation with numpy over its JSON
lines: per token string, its mean log-ratio (``logprobs − ref_logprobs``, TRL's ``per_token_logps`` and
``ref_per_token_logps``, huggingface/trl ``trl/trainer/grpo_trainer.py`` lines 3071-3072 at f2cd577) at
each of two steps, ranked by how far it moved; the URL's steps resolved by the run's step rule; the token
filter each row opens matches exactly its token."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import polars as pl
import pytest

from data.ingest import ingest_run
from data.run_context import context_of
from data.store import open_store
from data.token_drift import drifting_tokens, exact_token_pattern
from data.views import links
from data.views.codec import parse_search
from data.views.drift import DriftView, board_rows
from data.views.responses import ResponsesView

PADS = ("<pad>",)
RUN = "trl-grpo-small"


@pytest.fixture(scope="module")
def store(fixtures_dir, tmp_path_factory):
    return open_store(ingest_run(fixtures_dir / RUN, tmp_path_factory.mktemp("drift"), PADS).store_dir)


def by_hand(fixtures_dir, a: int, b: int, min_n: int) -> list[tuple[str, int, float, int, float, float]]:
    """``(token, n_a, mean_a, n_b, mean_b, change)`` of the tokens seen ``min_n`` times at both steps, the
    largest |change| first (ties by token): numpy over the rank files."""
    seen = {a: defaultdict(list), b: defaultdict(list)}
    for name in ("rank0.jsonl", "rank1.jsonl"):
        with open(fixtures_dir / RUN / name) as f:
            for line in f:
                rec = json.loads(line)
                if rec["step"] in seen:
                    ratio = np.asarray(rec["logprobs"]) - np.asarray(rec["ref_logprobs"])
                    for tok, x in zip(rec["response_tokens"], ratio, strict=True):
                        seen[rec["step"]][tok].append(x)
    out = []
    for tok in set(seen[a]) & set(seen[b]):
        xa, xb = seen[a][tok], seen[b][tok]
        if len(xa) >= min_n and len(xb) >= min_n:
            out.append(
                (
                    tok,
                    len(xa),
                    float(np.mean(xa)),
                    len(xb),
                    float(np.mean(xb)),
                    float(np.mean(xb) - np.mean(xa)),
                )
            )
    return sorted(out, key=lambda r: (-abs(r[5]), r[0]))


@pytest.mark.parametrize("min_n", [1, 2, 5])
def test_drift001_steps_1_and_last_match_hand(store, fixtures_dir, min_n):
    """Steps 1 and 25: the board's tokens, counts, means and changes equal the hand computation, in the
    same order (the first ones are the tokens a hand computation ranks first)."""
    want = by_hand(fixtures_dir, 1, 25, min_n)
    got = drifting_tokens(store, 1, 25, "log_ratio", min_n)
    assert got.get_column("token").to_list() == [r[0] for r in want]
    for row, w in zip(got.iter_rows(), want, strict=True):
        assert row[1] == w[1] and row[3] == w[3]
        assert row[2] == pytest.approx(w[2], abs=1e-9) and row[4] == pytest.approx(w[4], abs=1e-9)
        assert row[5] == pytest.approx(w[5], abs=1e-9)


def test_drift002_url_steps_by_the_step_rule(store, fixtures_dir):
    """``a=1&b=60`` on a run of 25 steps: step 60 is shown as step 25 with a notice, and the board is that
    of steps 1 and 25, its first token the hand computation's first."""
    ctx = context_of(RUN, store)
    view, notes = DriftView.from_query(parse_search("a=1&b=60&min_n=2"), ctx)
    assert (view.a, view.b) == (1, 25) and len(notes) == 1 and "60" in notes[0]
    rows, ranked = board_rows(store, view, ctx.step_list)
    want = by_hand(fixtures_dir, 1, 25, 2)
    assert ranked == len(want) and rows.item(0, "token") == want[0][0]
    assert DriftView.from_query(parse_search(view.to_query()), ctx)[0] == view


def test_drift003_row_opens_exactly_its_token(store):
    """Each row's pattern matches its own token string and no other of the run's tokens; its link is the
    responses view filtered on it."""
    tokens = (
        pl.concat([pl.read_parquet(f, columns=["response_tokens"]) for f in store.part_files()])
        .explode("response_tokens")
        .get_column("response_tokens")
        .unique()
        .drop_nulls()
    )
    for tok in tokens.to_list():
        hits = tokens.filter(tokens.str.contains(exact_token_pattern(tok))).to_list()
        assert hits == [tok]
    for tok in ["(", "a-b", "#", "~&", "\\", "[x]", "a.b|c"]:
        assert pl.Series([tok, tok + "x", "x" + tok]).str.contains(exact_token_pattern(tok)).to_list() == [
            True,
            False,
            False,
        ]
    href = links.token_responses(RUN, 25, exact_token_pattern("Ġ."), "log_ratio")
    view, notes = ResponsesView.from_query(parse_search(href.split("?", 1)[1]))
    assert notes == [] and view.tok == "^Ġ\\.$" and view.step == 25 and view.tok_metric == "log_ratio"
