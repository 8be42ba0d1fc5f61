"""The token strip's scale against one extreme token (data/token_scale.py) on the real TRL GRPO run: the
run's 99.9th percentile of each per-token metric against the files read by hand, the strip of the response
whose one token has k3 ≈ 508 (rank1.jsonl:142, step 18) clipped there, and a sampled run saying so."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from components.token_strip import legend
from data import token_scale as ts
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.store import open_store
from data.tokens import strip, token_view

RUN = "trl-grpo-small"


@pytest.fixture(scope="module")
def grpo(fixtures_dir, tmp_path_factory):
    store = open_store(
        ingest_run(fixtures_dir / RUN, tmp_path_factory.mktemp("c"), DEFAULT_PAD_TOKENS).store_dir
    )
    kl, lr = [], []
    for f in sorted((fixtures_dir / RUN).glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            for a, b in zip(r["logprobs"], r["ref_logprobs"], strict=False):
                lr.append(a - b)
                kl.append(math.exp(b - a) - 1 - (b - a))
    return store, np.array(kl), np.array(lr)


def test_tokenscale001_run_quantiles_are_the_files(grpo):
    """Every response read (400 ≤ SAMPLE_ROWS): the KL's 99.9th percentile and the |log-ratio|'s are those
    of every position of the files (the 'higher' value: one of the run's own)."""
    store, kl, lr = grpo
    got = ts.run_scale(store, DEFAULT_PAD_TOKENS)
    assert got.exact and (got.responses, got.total, got.tokens) == (400, 400, kl.size) == (400, 400, 5785)
    assert got.values["kl"] == pytest.approx(np.quantile(kl, 0.999, method="higher"), rel=1e-12)
    assert got.values["log_ratio"] == pytest.approx(
        np.quantile(np.abs(lr), 0.999, method="higher"), rel=1e-12
    )
    assert got.values["kl"] == pytest.approx(21.9407677611, rel=1e-9)
    assert "value" not in got.values  # GRPO: no critic
    assert got.source() == "the run's 99.9th percentile (5,785 tokens)"


def test_tokenscale002_extreme_token_clips_the_strip(grpo):
    """The response whose one token has k3 ≈ 508 is coloured on 0..21.94 (the run's 99.9th percentile), its
    legend saying "clipped at 21.9 (max 508)"; a response under the percentile keeps its own scale."""
    store, kl, _ = grpo
    run = ts.run_scale(store, DEFAULT_PAD_TOKENS)
    ids = store.scan(["sample_id", "source", "line"]).collect()
    sid = ids.filter((ids["source"] == "rank1.jsonl") & (ids["line"] == 142)).item(0, "sample_id")
    view = token_view(store, sid, DEFAULT_PAD_TOKENS)
    metric, _, shown, scale = strip(view, "kl", False, run=run)
    lo, hi, signed, (peak, note) = scale
    assert (metric, lo, signed) == ("kl", 0.0, False) and hi == run.values["kl"]
    assert peak == pytest.approx(kl.max(), rel=1e-9) == pytest.approx(507.98673837, rel=1e-9)
    assert "clipped at KL (k3) = 21.94" in note and "goes to 508" in note
    text = str(legend("KL (k3)", lo, hi, ((0, (0, 0, 0)), (1, (9, 9, 9))), signed, scale[3]))
    assert "clipped at 21.9 (max 508)" in text and "≥ 21.9" in text
    # Its |log-ratio| peaks at 6.24, under the run's 10.2: its own scale, not clipped.
    signed_scale = strip(view, "log_ratio", False, run=run)[3]
    assert signed_scale[3] is None and signed_scale[1] == pytest.approx(6.2446160316, rel=1e-9)
    text = str(legend("log-ratio", -1.0, 1.0, ((0, (0, 0, 0)), (1, (9, 9, 9))), True, (5.0, "why")))
    assert "clipped at ±1 (max 5)" in text and "≤ -1" in text and "≥ 1" in text
    first = ids.filter((ids["source"] == "rank0.jsonl") & (ids["line"] == 1)).item(0, "sample_id")
    calm = strip(token_view(store, first, DEFAULT_PAD_TOKENS), "kl", False, run=run)[3]
    assert calm[3] is None and calm[1] < run.values["kl"]


def test_tokenscale003_a_sample_says_so(fixtures_dir, tmp_path, monkeypatch):
    """Past SAMPLE_ROWS responses, whole row groups spread over the run are read, and the legend's note says
    how many tokens of how many responses of the run's."""
    monkeypatch.setattr(ts, "SAMPLE_ROWS", 100)
    store = open_store(ingest_run(fixtures_dir / RUN, tmp_path, DEFAULT_PAD_TOKENS).store_dir)
    got = ts.run_scale(store, DEFAULT_PAD_TOKENS)
    assert not got.exact and got.total == 400 and 100 <= got.responses < 400
    assert got.source().startswith(
        f"the 99.9th percentile of {got.tokens:,} tokens of {got.responses:,} responses"
    )
    assert got.source().endswith("spread over the run's 400") and got.values["kl"] > 0


def test_tokenscale004_a_run_without_token_arrays_clips_nothing(fixtures_dir, tmp_path):
    """An evaluation dump (no token arrays) has no per-token values: nothing to clip at, no error."""
    store = open_store(
        ingest_run(fixtures_dir / "rlloggingboard-eval-poem", tmp_path, DEFAULT_PAD_TOKENS).store_dir
    )
    got = ts.run_scale(store, DEFAULT_PAD_TOKENS)
    assert (got.values, got.tokens, got.total) == ({}, 0, 3000)
    assert ts.clipped_scale("kl", 0.0, 3.0, got) == (0.0, 3.0, None)
