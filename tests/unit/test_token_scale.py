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
    got = ts.run_scale(store)
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
    run = ts.run_scale(store)
    ids = store.scan(["sample_id", "source", "line"]).collect()
    sid = ids.filter((ids["source"] == "rank1.jsonl") & (ids["line"] == 142)).item(0, "sample_id")
    view = token_view(store, sid, DEFAULT_PAD_TOKENS)
    metric, _, shown, scale = strip(view, "kl", False, run=run)
    lo, hi, signed, (peak, note) = scale.lo, scale.hi, scale.signed, scale.clip
    assert (metric, lo, signed) == ("kl", 0.0, False) and hi == run.values["kl"]
    assert peak == pytest.approx(kl.max(), rel=1e-9) == pytest.approx(507.98673837, rel=1e-9)
    assert "clipped at KL (k3) = 21.94" in note and "goes to 508" in note
    text = str(legend("KL (k3)", lo, hi, ((0, (0, 0, 0)), (1, (9, 9, 9))), signed, scale.clip))
    assert "clipped at 21.9 (max 508)" in text and "≥ 21.9" in text
    # Its |log-ratio| peaks at 6.24, under the run's 10.2: its own scale, not clipped.
    signed_scale = strip(view, "log_ratio", False, run=run)[3]
    assert signed_scale.clip is None and signed_scale.hi == pytest.approx(6.2446160316, rel=1e-9)
    text = str(legend("log-ratio", -1.0, 1.0, ((0, (0, 0, 0)), (1, (9, 9, 9))), True, (5.0, "why")))
    assert "clipped at ±1 (max 5)" in text and "≤ -1" in text and "≥ 1" in text
    first = ids.filter((ids["source"] == "rank0.jsonl") & (ids["line"] == 1)).item(0, "sample_id")
    calm = strip(token_view(store, first, DEFAULT_PAD_TOKENS), "kl", False, run=run)[3]
    assert calm.clip is None and calm.hi < run.values["kl"]


def test_tokenscale003_a_sample_says_so(fixtures_dir, tmp_path, monkeypatch):
    """Past SAMPLE_ROWS responses, whole row groups spread over the run are read, and the legend's note says
    how many tokens of how many responses of the run's."""
    monkeypatch.setattr(ts, "SAMPLE_ROWS", 100)
    store = open_store(ingest_run(fixtures_dir / RUN, tmp_path, DEFAULT_PAD_TOKENS).store_dir)
    got = ts.run_scale(store)
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
    got = ts.run_scale(store)
    assert (got.values, got.tokens, got.total) == ({}, 0, 3000)
    assert ts.clipped_scale("kl", 0.0, 3.0, got) == (0.0, 3.0, None)


def _lab(rgb: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a CSS ``rgb(r,g,b)``: colours compared as the eye does (CIE76 ΔE)."""
    lin = [
        c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
        for c in (int(x) / 255 for x in rgb[4:-1].split(","))
    ]
    xyz = [
        sum(w * c for w, c in zip(row, lin, strict=True)) / n
        for row, n in (
            ((0.4124, 0.3576, 0.1805), 0.95047),
            ((0.2126, 0.7152, 0.0722), 1.0),
            ((0.0193, 0.1192, 0.9505), 1.08883),
        )
    ]
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


# Two tokens' colours "apart": CIE76 ΔE of at least this (2.3 is the least difference the eye sees; 2 to 10
# is told at a glance).
APART = 5.0


def test_tokenscale005_other_tokens_stay_apart(grpo, fixtures_dir):
    """Issue 35 item 2 (its done-when): on rank1.jsonl:142 (step 18) the tokens of KL 0.196 ('or'), 0.417 ('Ġh') and
    1.284 ('Ġ', position 0), computed by hand from the file, are filled with colours at least APART
    from each other on the strip's log scale (ΔE 8.1, 12.4, 20.2), where the clipped linear scale
    (before) put the first two ΔE 1.1 apart; the k3 ≈ 508 token is at the top of the palette, and the legend says "log scale",
    "clipped at 21.9 (max 508)" and ticks in KL's own values. Every token's place is the definition's
    ln(1 + v/s) / ln(1 + 21.94/s), s = the run's median KL, by hand."""
    from components.theme import ORANGES
    from components.token_strip import PALETTE_SIZE, palette, strip_data
    from data.strip_scale import STRIP_AT

    store, kl, _ = grpo
    run = ts.run_scale(store)
    s = float(np.quantile(kl, 0.5, method="higher"))
    assert run.knee("kl") == pytest.approx(s, rel=1e-12) == pytest.approx(0.0038441054, rel=1e-8)
    ids = store.scan(["sample_id", "source", "line"]).collect()
    sid = ids.filter((ids["source"] == "rank1.jsonl") & (ids["line"] == 142)).item(0, "sample_id")
    view = token_view(store, sid, DEFAULT_PAD_TOKENS)
    _, _, shown, scale = strip(view, "kl", False, run=run)
    assert (scale.kind, scale.hi, scale.clip[0]) == ("log", run.values["kl"], pytest.approx(507.98673837))
    rows = json.loads((fixtures_dir / RUN / "rank1.jsonl").read_text().splitlines()[141])
    by_hand = [
        math.exp(b - a) - 1 - (b - a) for a, b in zip(rows["logprobs"], rows["ref_logprobs"], strict=True)
    ]
    hi = run.values["kl"]
    want = [min(1.0, math.log1p(k / s) / math.log1p(hi / s)) for k in by_hand[: shown.height]]
    assert shown.get_column(STRIP_AT).to_list() == pytest.approx(want, rel=1e-9)

    data = json.loads(strip_data(shown, STRIP_AT, 0.0, 1.0, ORANGES, "k", [("kl", "KL (k3)")])["json"])
    fill = {pos: data["bg"][c] for pos, c in zip(data["pos"], data["colour"], strict=True)}
    pos_of = {round(k, 3): i for i, k in enumerate(by_hand)}
    picked = [pos_of[0.196], pos_of[0.417], pos_of[1.284]]
    assert [data["raw"][p] for p in picked] == ["or", "Ġh", "Ġ"]
    labs = [_lab(fill[p]) for p in picked]
    for i, a in enumerate(labs):
        for b in labs[i + 1 :]:
            assert math.dist(a, b) >= APART, (labs, [fill[p] for p in picked])
    bgs, _ = palette(ORANGES)
    before = [_lab(bgs[round(by_hand[p] / hi * (PALETTE_SIZE - 1))]) for p in picked]  # clipped, linear
    # The test can fail: before, 0.196 and 0.417 were ΔE 1.1 apart (0.9 % and 1.9 % of a linear 0..21.9).
    assert math.dist(before[0], before[1]) < 2.3
    top = pos_of[507.987]
    assert data["colour"][top] == PALETTE_SIZE - 1 and max(data["colour"]) == PALETTE_SIZE - 1

    text = str(legend("KL (k3)", scale.lo, hi, ORANGES, False, scale.clip, scale.ticks(), scale.caption()))
    for part in ("log scale", "clipped at 21.9 (max 508)", "'0.1'", "'1'", "'≥ 21.9'", "'0'"):
        assert part in text, part


def test_tokenscale006_ratio_centred_on_one_and_signed_symmetric():
    """The importance ratio's scale is the log of it, centred on 1: ½ and 2 equally far from 1 (their places
    add up to 1), ticks at 0.5, 1 and 2 (by hand: ratios 0.5, 1, 2, 4; median |ln r| = ln 2 is the linear
    part, ln 4 the end); a signed log scale is symmetric around 0; a scale whose linear part covers its
    range is linear and says nothing."""
    import polars as pl

    from data.strip_scale import strip_scale

    sc = strip_scale("imp_ratio", pl.Series([0.5, 1.0, 2.0, 4.0]), False, None)
    assert (sc.kind, sc.signed, sc.lo, sc.hi) == ("ratio", True, pytest.approx(0.25), pytest.approx(4.0))
    assert sc.knee == pytest.approx(math.log(2))
    assert sc.at(1.0) == 0.5 and sc.at(0.5) + sc.at(2.0) == pytest.approx(1.0)
    assert sc.at(2.0) == pytest.approx(0.5 + 0.5 * math.log1p(1.0) / math.log1p(2.0))
    assert [round(v, 6) for _, v, _ in sc.ticks()] == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert sc.caption()[0] == "log scale, centred on 1"
    lr = strip_scale("log_ratio", pl.Series([-3.0, 0.01, 0.02, 0.1, 3.0]), True, None)
    assert lr.kind == "log" and lr.at(-0.1) == pytest.approx(1 - lr.at(0.1)) and lr.at(0.0) == 0.5
    flat = strip_scale("kl", pl.Series([0.1, 0.3, 0.3]), False, None)
    assert (flat.kind, flat.caption(), [v for _, v, _ in flat.ticks()]) == ("linear", None, [0.0, 0.3])


def test_tokenscale007_kept_by_the_commit_equals_the_parts(grpo, tmp_path, monkeypatch):
    """The commit that ends an ingest pass keeps the scale (tokscale-g*.json, data.derived.tokscale): what
    the page reads is what the parts give (by hand above: the files' 99.9th percentile), field for field; a
    commit made mid-read keeps none and the page computes the same; a kept file that is not the writer's
    JSON is not trusted (computed instead)."""
    from data.derived import tokscale
    from data.ingest import writer as ingest_writer

    store, kl, _ = grpo
    name = store.manifest.derived_name("tokscale")
    assert name and name.startswith("tokscale-g") and (store.dir / name).is_file()
    kept = ts.from_json((store.dir / name).read_bytes())
    assert kept == ts.run_scale(store) == ts.compute(store)
    assert kept.values["kl"] == pytest.approx(np.quantile(kl, 0.999, method="higher"), rel=1e-12)
    assert ts.from_json(ts.to_json(kept)) == kept
    for bad in (
        b"[]",
        b"{",
        b'{"values": {"kl": "x"}}',
        ts.to_json(kept).replace(b'"exact":true', b'"exact":1'),
    ):
        assert ts.from_json(bad) is None, bad

    # A mid-read commit (no prompt aggregates) keeps no scale; the page's is then computed, the same.
    real = ingest_writer._Writer._commit
    monkeypatch.setattr(
        ingest_writer._Writer,
        "_commit",
        lambda self, data, complete, **kw: real(self, data, complete, aggregates=False),
    )
    mid = open_store(ingest_run(store.manifest.run_path, tmp_path, DEFAULT_PAD_TOKENS).store_dir)
    assert mid.manifest.derived_name("tokscale") is None and not list(mid.dir.glob("tokscale-g*"))
    assert ts.run_scale(mid) == kept

    # A kept file that is garbage is not read as a scale.
    (store.dir / name).write_bytes(b'{"values": []}')
    assert ts.run_scale(store) == kept
    (store.dir / name).write_bytes(ts.to_json(kept))
    assert tokscale.FILE_KEY in store.manifest.to_dict()
