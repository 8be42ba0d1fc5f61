"""Run discovery on a page load: the rollout root is listed once, not at every callback's store lookup."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import dash_post
from tests.integration.test_reward import HEATMAP, PPO, URL, _curves, _i, _step_view, sync


def test_discovery001_one_root_listing_per_reward_page_load(client, contract_root, monkeypatch):
    """A reward page load (its layout and the five callbacks the browser then sends) lists the rollout
    root once and each run folder at most once per lookup of its files (was 15-19 listings: each store
    lookup discovered the runs twice, listing the root and every run folder)."""
    import pages.reward as page
    from data import service
    from data.service import board

    board().store(PPO, wait=60)  # ingested before, as a page load finds it
    root = Path(board().root).resolve()
    listed: list[Path] = []
    real = Path.iterdir

    def counting(self):
        listed.append(Path(self).resolve())
        return real(self)

    monkeypatch.setattr(board(), "_scan", None)  # nothing remembered from earlier tests
    monkeypatch.setattr(service, "RUNS_SECONDS", 60.0)  # a page load that a loaded machine makes slow
    monkeypatch.setattr(Path, "iterdir", counting)
    page.layout(run=PPO, step="5")
    sync(client, f"?run={PPO}&step=5", index=4, run=PPO, selected=5)
    _curves(client, PPO, 5)
    _step_view(client, PPO, 5)
    heat = [
        _i("reward-run", "data", PPO),
        _i("reward-selected", "data", 5),
        _i(URL, "search", f"?run={PPO}&step=5"),
    ]
    dash_post(
        client, HEATMAP, heat, [_i("reward-heatmap-drawn", "data", None), _i(URL, "pathname", "/reward")]
    )
    assert listed.count(root) == 1, listed
    assert len(listed) <= 1 + len(board().runs()) + 1, listed  # the root, its folders once, PPO's files
