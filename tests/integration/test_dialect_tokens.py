"""Atropos' groups and prime-rl's episodes, laid out in a rollout root as their writers lay them out, ingested
and shown by the token page's data functions (those its callbacks call): the per-token fields each file
carries reach the page, against the values written (the writers' sources are cited in
tests/unit/ingest/test_dialect_atropos.py and test_dialect_prime_rl.py)."""

from __future__ import annotations

import pytest

from data.ingest import ingest_run
from data.metrics.token import file_column
from data.store import open_store, sample_id
from data.tokens import first_sample, hover_columns, metric_options, strip, token_view
from tests.unit.ingest.test_dialect_atropos import _gsm8k_group
from tests.unit.ingest.test_dialect_atropos import _write as write_groups
from tests.unit.ingest.test_dialect_prime_rl import REL, _episode, _single_turn
from tests.unit.ingest.test_dialect_prime_rl import _write as write_episodes

PADS = ("<pad>",)


def test_dialect_tokens001_atropos_group_on_the_token_page(tmp_path):
    """An Atropos group with advantages and reference log-probs: each rollout's token view has its own
    tokens, KL drawn from logprobs (inference) and ref_logprobs, advantages as a field of the trainer's own;
    the first response of the run is rollout 0, and next / previous walk the group's rollouts in order."""
    group = _gsm8k_group(0, n=3)
    group["ref_logprobs"] = [[lp - 0.5 for lp in lps] for lps in group["inference_logprobs"]]
    group["advantages"] = [[float(i)] * len(t) for i, t in enumerate(group["tokens"])]
    src = tmp_path / "root" / "gsm8k" / "data" / "gsm8k.jsonl"
    write_groups(src, [group])
    store = open_store(ingest_run(src.parent.parent, tmp_path / "cache", PADS).store_dir)
    line = sample_id("data/gsm8k.jsonl", 1)
    assert first_sample(store) == f"{line}.0"
    for i in range(3):
        view = token_view(store, f"{line}.{i}", PADS)
        kept = [j for j, m in enumerate(group["masks"][i]) if m != -100]
        assert view.tokens.get_column("token").to_list() == [str(group["tokens"][i][j]) for j in kept]
        assert view.file_fields == ("advantages",)
        metric, notes, shown, _ = strip(view, "kl", show_pads=False)
        assert metric == "kl"
        # k3 of r = ref − logprob = −0.5 at every position: exp(−0.5) − 1 + 0.5.
        assert shown.get_column("kl").to_list() == pytest.approx([0.10653066] * len(kept))
        assert shown.get_column(file_column("advantages")).to_list() == [float(i)] * len(kept)
        assert (file_column("advantages"), "advantages (from the file)") in hover_columns(view)
        assert view.nav.prev_id == (f"{line}.{i - 1}" if i else None)
        assert view.nav.next_id == (f"{line}.{i + 1}" if i < 2 else None)


def test_dialect_tokens002_prime_rl_episode_on_the_token_page(tmp_path):
    """A prime-rl episode at rollouts/step_3/train/all/traces.jsonl: its response's token view has the
    sampled tokens, KL from the sampler's and the reference log-probs, and advantages and the loss-weight
    stream as fields of the trainer's own the metric picker offers."""
    run = tmp_path / "root" / "prime"
    write_episodes(
        run / REL, [_episode([_single_turn([40, 41], [-0.5, -0.25], [1.0, -1.0], [-0.75, -0.5], 1.0)])]
    )
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    view = token_view(store, f"{sample_id(REL, 1)}.0", PADS)
    assert view.tokens.get_column("token").to_list() == ["40", "41"]
    assert set(view.file_fields) == {"advantages", "loss_weights.echo"}
    values = {
        o["value"] for o in metric_options("kl", view.fields, view.file_fields) if not o.get("disabled")
    }
    assert {"kl", file_column("advantages"), file_column("loss_weights.echo")} <= values
    _, _, shown, _ = strip(view, file_column("advantages"), show_pads=False)
    assert shown.get_column(file_column("advantages")).to_list() == [1.0, -1.0]
    assert shown.get_column("log_ratio").to_list() == pytest.approx([0.25, 0.25])
