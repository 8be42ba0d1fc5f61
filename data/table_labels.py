"""The responses table's headers and tooltips: the registry's label and description of each column, the
critic's columns naming the returns the run's value errors were measured against (data.metrics.critic)."""

from __future__ import annotations

from collections.abc import Iterable

from data.curves import summary_columns
from data.metrics import METRICS, label
from data.metrics.critic import return_label, return_source
from data.store import RunStore

# The per-response columns measured against a return (value_t − return_t).
CRITIC_COLUMNS = ("value_error_mean", "value_error_abs_mean")
EXTRA = "extra field of the files"
# What return_t is, by the run's return source (the tooltip of CRITIC_COLUMNS).
RETURN_DEFINITIONS = {
    "file": "return_t = the trainer's own returns field",
    "gamma1": "return_t = Σ_{k≥t} token_reward_k (γ = 1)",
    "mixed": "return_t = the trainer's returns field where given, else Σ_{k≥t} token_reward_k (γ = 1)",
}


def run_return_source(store: RunStore) -> str | None:
    """Which returns the run's value errors used over all its steps (``file``, ``gamma1`` or ``mixed``, see
    data.metrics.critic.return_source), from the per-step summary's counts; None without values."""
    counts = summary_columns(store, ("critic_n", "critic_file_n"))
    if "critic_n" not in counts.columns:
        return None
    return return_source(counts.get_column("critic_file_n").sum(), counts.get_column("critic_n").sum())


def table_texts(store: RunStore, columns: Iterable[str]) -> tuple[tuple[str, str, str], ...]:
    """``(column, header, tooltip)`` of each of ``columns``: a metric's registry label and description, a
    file's extra field said so; :data:`CRITIC_COLUMNS` labelled with their returns ('value error mean
    |value − return| (trainer returns)') and their tooltip saying what the return is."""
    columns = tuple(columns)
    source = run_return_source(store) if set(CRITIC_COLUMNS) & set(columns) else None
    out = []
    for c in columns:
        if c in CRITIC_COLUMNS and source is not None:
            what = RETURN_DEFINITIONS[source]
            out.append((c, return_label(c, source), f"{METRICS[c].description}, {what}"))
        else:
            out.append((c, label(c), METRICS[c].description if c in METRICS else EXTRA))
    return tuple(out)
