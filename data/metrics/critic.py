"""The critic's return: which one a critic metric was measured against (the trainer's own, or γ = 1), and
the labels that say so (see data.metrics.registry for the metrics, data.metrics.step for a step's pooling)."""

from __future__ import annotations

from data.metrics.registry import label

# The field of a file that holds the trainer's own return of each token (TRL's PPO writes it:
# trl/experimental/ppo/ppo_trainer.py, ``returns = advantages + values``); where a response has none, the
# return is Σ_{k≥t} token_reward_k (γ = 1).
RETURN_FIELD = "returns"
RETURN_SOURCES = {
    "file": "trainer returns",
    "gamma1": "γ = 1 returns",
    "mixed": "trainer returns where given, else γ = 1",
}


def return_source(file_n: float | None, n: float | None) -> str | None:
    """Which returns a critic metric used, from the positions counted (``n``) and those of them whose return is
    the file's own (``file_n``): ``file``, ``gamma1`` or ``mixed``; None without any position."""
    if not n:
        return None
    file_n = file_n or 0
    return "file" if file_n >= n else "gamma1" if file_n == 0 else "mixed"


def return_label(key: str, source: str | None) -> str:
    """The label of a critic metric (``return``, ``value_error``, ``explained_variance``,
    ``value_error_abs_pooled``, ``value_error_abs_mean``) saying which returns it used: 'explained variance
    (trainer returns)', 'explained variance (γ = 1 returns)'; the bare label where ``source`` is None."""
    base = label(key)
    return f"{base} ({RETURN_SOURCES[source]})" if source in RETURN_SOURCES else base
