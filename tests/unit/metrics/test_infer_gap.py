"""The inference–trainer gap on NeMo-RL dumps: each response's four infer_gap columns and each step's tail
share, as ingest stores them, equal a computation by hand with numpy from the files' own arrays.

NeMo-RL compares the same two arrays in its loss (nemo_rl/algorithms/loss_functions.py, ClippedPGLossFn:
``lp_error = torch.abs(generation_logprobs - prev_logprobs)`` under ``mask = token_mask * sample_mask``), and
its GRPO loop logs them per sample with ``token_loss_mask`` and ``input_lengths`` (grpo.py's log_data, written
by Logger.log_batched_dict_as_jsonl as a batch of one a line)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from data.ingest import ingest_run
from data.store import open_store
from tests.conftest import FIXTURES_DIR

PADS = ("<pad>", "<|endoftext|>")
TAIL = math.log(2)


def hand_gap(line: dict) -> dict:
    """By hand from one NeMo-RL line: the generated positions (token_loss_mask 1 within input_lengths), Δ =
    prev_logprobs − generation_logprobs there, those finite counted unless sample_loss_mask is 0 (the loss's
    mask is their product); the four columns and the counts."""
    one = {k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in line.items()}
    mask, n = np.array(one["token_loss_mask"]), int(one["input_lengths"])
    keep = np.flatnonzero(mask[:n] == 1)
    if one.get("sample_loss_mask", 1) == 0:
        keep = keep[:0]
    d = np.array(one["prev_logprobs"], float)[keep] - np.array(one["generation_logprobs"], float)[keep]
    pos = np.arange(len(keep))[np.isfinite(d)]
    d = d[np.isfinite(d)]
    tail = np.abs(d) > TAIL
    if not len(d):
        return {"n": 0, "tail": 0, "abs_mean": None, "abs_max": None, "share": None, "first": None}
    return {
        "n": len(d),
        "tail": int(tail.sum()),
        "abs_mean": float(np.abs(d).mean()),
        "abs_max": float(np.abs(d).max()),
        "share": float(tail.mean()),
        "first": int(pos[tail][0]) if tail.any() else None,
    }


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def assert_gap_columns_by_hand(run: Path, cache: Path) -> None:
    """Ingest ``run`` (NeMo-RL train_data_step*.jsonl) and compare every response's columns and every step's
    pooled tail share with :func:`hand_gap` of its line."""
    res = ingest_run(run, cache, PADS)
    store = open_store(res.store_dir)
    got = {(r["source"], r["line"]): r for r in store.scalars().iter_rows(named=True)}
    per_step: dict[int, list[int]] = {}
    compared = 0
    for path in sorted(run.glob("train_data_step*.jsonl")):
        for i, line in enumerate(_lines(path), start=1):
            h, row = hand_gap(line), got[(path.name, i)]
            if h["n"]:
                compared += 1
                assert row["infer_gap_n"] == h["n"] and row["infer_gap_tail_n"] == h["tail"]
                assert row["infer_gap_abs_mean"] == pytest.approx(h["abs_mean"], rel=1e-6, abs=1e-7)
                assert row["infer_gap_abs_max"] == pytest.approx(h["abs_max"], rel=1e-6, abs=1e-7)
                assert row["infer_gap_tail_share"] == pytest.approx(h["share"], rel=1e-12)
            else:
                assert row["infer_gap_n"] is None and row["infer_gap_abs_mean"] is None
            assert row["infer_gap_first_tail"] == h["first"]
            counts = per_step.setdefault(row["step"], [0, 0])
            counts[0] += h["n"]
            counts[1] += h["tail"]
    assert compared > 0
    steps = store.steps()
    for step, (n, tail) in per_step.items():
        s = steps.filter(steps["step"] == step).row(0, named=True)
        assert (s["infer_gap_n_total"], s["infer_gap_tail_n_total"]) == (n, tail)
        assert s["infer_gap_tail_pooled"] == (pytest.approx(tail / n, rel=1e-12) if n else None)


def nemo_rl_line(
    idx: int, prompt: int, prev: list[float], gen: list[float], width: int, sample_mask: float = 1.0
) -> dict:
    """One GRPO sample as NeMo-RL logs it: a batch of one, ``content`` (prompt, the model's turn, the
    environment's), full-sequence arrays over prompt and response right-padded to ``width``, the loss mask 1
    on the model's tokens, log-probs 0 on the prompt."""
    n = prompt + len(prev)
    pad = width - n
    return {
        "content": [["What is 2+2?", "It is 4.", "Environment: correct"]],
        "rewards": [1.0],
        "input_lengths": [n],
        "token_ids": [list(range(100, 100 + n)) + [0] * pad],
        "token_loss_mask": [[0] * prompt + [1] * len(prev) + [0] * pad],
        "sample_loss_mask": [sample_mask],
        "advantages": [[0.0] * width],
        "generation_logprobs": [[0.0] * prompt + gen + [0.0] * pad],
        "prev_logprobs": [[0.0] * prompt + prev + [0.0] * pad],
        "idx": idx,
    }


# One response by hand: Δ = 0, −0.25, 0, 1.0, 0.9 on the model's 5 tokens; |Δ| > ln 2 = 0.693 at 3 and 4.
BY_HAND_PREV = [-0.5, -1.25, -0.25, -1.5, -0.1]
BY_HAND_GEN = [-0.5, -1.0, -0.25, -2.5, -1.0]


def write_nemo_rl_run(run: Path, seed: int = 0) -> None:
    """Two steps of 8 samples: the response by hand first, then random gaps, a few far (the tail); the last
    one out of the loss (sample_loss_mask 0: no position of it counts)."""
    rng = random.Random(seed)
    run.mkdir(parents=True)
    for step in (1, 2):
        lines = [nemo_rl_line(0, 3, BY_HAND_PREV, BY_HAND_GEN, 16)]
        for i in range(1, 8):
            k = rng.randrange(1, 12)
            prev = [round(rng.uniform(-4, -0.01), 4) for _ in range(k)]
            gen = [p - rng.choice([0.0, 0.01, -0.02, 0.3, -0.8, 1.2 * step]) for p in prev]
            lines.append(nemo_rl_line(i, 3, prev, gen, 16, 0.0 if i == 7 else 1.0))  # 7: out of the loss
        (run / f"train_data_step{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_infer_gap001_nemo_rl_shaped_run_by_hand(tmp_path):
    """A run written as NeMo-RL writes it: the response by hand (Δ = 0, −0.25, 0, 1.0, 0.9: mean |Δ| 0.43,
    max 1.0, tail share 2/5, first tail token 3) and every other response and step against numpy."""
    run = tmp_path / "root" / "nemo"
    write_nemo_rl_run(run)
    h = hand_gap(nemo_rl_line(0, 3, BY_HAND_PREV, BY_HAND_GEN, 16))
    assert h == {"n": 5, "tail": 2, "abs_mean": pytest.approx(0.43), "abs_max": 1.0, "share": 0.4, "first": 3}
    assert_gap_columns_by_hand(run, tmp_path / "cache")


def _real_nemo_rl_runs() -> list[Path]:
    if not FIXTURES_DIR.is_dir():
        return []
    return sorted({p.parent for p in FIXTURES_DIR.rglob("train_data_step*.jsonl")})


def test_infer_gap002_real_nemo_rl_dumps_by_hand(tmp_path):
    """Every real NeMo-RL dump in ../shared/fixtures (train_data_step*.jsonl, generation_logprobs beside
    prev_logprobs): every response's four columns and every step's tail share against numpy."""
    runs = _real_nemo_rl_runs()
    if not runs:
        pytest.skip(f"no real NeMo-RL dump (train_data_step*.jsonl) under {FIXTURES_DIR}")
    for k, run in enumerate(runs):
        assert_gap_columns_by_hand(run, tmp_path / f"cache{k}")


def _hand_deltas(run: Path) -> dict[int, list[np.ndarray]]:
    """Per step, each response's Δ over its counted positions, by hand from the files (as :func:`hand_gap`)."""
    out: dict[int, list[np.ndarray]] = {}
    for path in sorted(run.glob("train_data_step*.jsonl")):
        step = int(path.stem.removeprefix("train_data_step"))
        for line in _lines(path):
            one = {k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in line.items()}
            keep = np.flatnonzero(np.array(one["token_loss_mask"])[: int(one["input_lengths"])] == 1)
            d = (
                np.array(one["prev_logprobs"], float)[keep]
                - np.array(one["generation_logprobs"], float)[keep]
            )
            if one.get("sample_loss_mask", 1) != 0:
                out.setdefault(step, []).append(d[np.isfinite(d)])
    return out


def test_infer_gap003_correction_shares_at_c2_by_hand(tmp_path):
    """At C = 2, per step: truncated IS clips the tokens with ratio > 2 (Δ > ln 2), masked IS masks those
    with ratio outside [½, 2], sequence masking drops the responses whose geometric-mean ratio is outside
    [½, 2]; the shares of tokens and of responses equal numpy's count from the files. A token budget of one
    step counts the token shares only at the step nearest the one asked, and says so."""
    from data.infer_gap import correction_preview, gap_steps

    run = tmp_path / "root" / "nemo"
    write_nemo_rl_run(run, seed=3)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    deltas = _hand_deltas(run)
    for c in (2.0, 1.2):  # C = 2 (the done-when), and 1.2 where the sequence rule drops responses too
        lc = math.log(c)
        hits = {
            "tis": lambda d, lc=lc: d > lc,
            "mis": lambda d, lc=lc: (d > lc) | (d < -lc),  # ratio < 1/C or > C
            "seq": lambda d, lc=lc: np.full(len(d), abs(d.mean()) > lc),
        }
        for rule, hit in hits.items():
            got = correction_preview(store, rule, c, None).frame
            assert got.get_column("step").to_list() == sorted(deltas)
            for step, ds in deltas.items():
                row = got.filter(got["step"] == step).row(0, named=True)
                tokens = sum(len(d) for d in ds)
                touched_tokens = sum(int(hit(d).sum()) for d in ds)
                touched = sum(bool(hit(d).any()) for d in ds)
                assert (row["tokens"], row["tokens_touched"]) == (tokens, touched_tokens), (rule, step)
                assert (row["responses"], row["responses_touched"]) == (len(ds), touched), (rule, step)
                assert row["token_share"] == pytest.approx(touched_tokens / tokens, rel=1e-12)
                assert row["response_share"] == pytest.approx(touched / len(ds), rel=1e-12)
            if rule != "seq" or c < 2:
                assert got.get_column("tokens_touched").sum() > 0, (rule, c)  # something to clip or mask
    tails = gap_steps(store)
    for step, ds in deltas.items():
        n, tail = sum(len(d) for d in ds), sum(int((np.abs(d) > TAIL).sum()) for d in ds)
        assert tails.filter(tails["step"] == step).item(0, "infer_gap_tail_pooled") == pytest.approx(tail / n)


def test_infer_gap004_token_shares_bounded_and_a_response_touched(tmp_path, monkeypatch):
    """With a budget of one step's positions, the token shares are counted at the asked step only (null at
    the other, said in the note); the tokens each rule touches on the response by hand."""
    import data.infer_gap as gap
    from data.metrics.token import explode_tokens, token_metrics

    run = tmp_path / "root" / "nemo"
    write_nemo_rl_run(run)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    monkeypatch.setattr(gap, "GAP_PREVIEW_TOKENS", 1)
    p = gap.correction_preview(store, "mis", 2.0, 2)
    assert p.counted == (2,) and not p.all_steps
    assert p.frame.get_column("token_share").is_null().to_list() == [True, False]
    assert "counted from the token arrays (exact) at the selected step (2), within 1 positions" in p.note()
    one = store.scan_parts().filter((pl.col("line") == 1) & (pl.col("step") == 1)).collect().head(1)
    tokens = token_metrics(explode_tokens(one.with_columns(row=0), PADS, ["generation_logprobs"]))
    # Δ = 0, −0.25, 0, 1.0, 0.9 (mean 0.33): at C = 2 (ln 2 = 0.69), at C = 1.2 (ln 1.2 = 0.18)
    assert gap.touched_positions(tokens, "tis", 2.0) == [3, 4] == gap.touched_positions(tokens, "mis", 2.0)
    assert gap.touched_positions(tokens, "seq", 2.0) == []
    assert gap.touched_positions(tokens, "tis", 1.2) == [3, 4]
    assert gap.touched_positions(tokens, "mis", 1.2) == [1, 3, 4]
    assert gap.touched_positions(tokens, "seq", 1.2) == [0, 1, 2, 3, 4]


def test_infer_gap005_a_run_without_inference_logprobs_says_so_once_per_chart(tmp_path, fixtures_dir):
    """On a run with no inference engine's log-probs (the TRL GRPO run), the gap page's three charts are empty
    with a short line that fits a chart, and each card's note says why once."""
    from data import gap_panels, infer_gap

    store = open_store(ingest_run(fixtures_dir / "trl-grpo-small", tmp_path / "cache", PADS).store_dir)
    panels = gap_panels.gap_panels(infer_gap.gap_steps(store), "p25-p75")
    panels.append(gap_panels.correction_panel(infer_gap.correction_preview(store, "mis", 2.0, None)))
    assert [p.key for p in panels] == ["gap", "tail", "correction"]
    assert all(p.series == () and p.empty == gap_panels.NO_GAP_SHORT for p in panels)
    assert all(p.note == gap_panels.NO_GAP for p in panels)
    assert len(gap_panels.NO_GAP_SHORT) < 40  # one line in a half-width chart at 1440 px
