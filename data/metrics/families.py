"""Families of the registry's per-response columns built from one table each: the inference–trainer gap's
columns and the critic's sums. Part of :data:`data.metrics.registry.COLUMNS` (in its order: the critic's sums,
then the gap's, after the token reward sum)."""

from __future__ import annotations

import math

from data.metrics.metric import ROW, Metric

# |trainer − inference log-prob| (nats) above which a token is in the inference–trainer gap's tail: ln 2, a
# ratio exp(Δ) beyond ½ or 2. The one threshold of the per-response columns below (counted at ingest), the
# per-step curves and the token page's summary line; data.config names it with the settings
# (data.config.INFER_GAP_TAIL). A constant, not an environment variable: ingest counts with it, and no store
# is keyed on it.
INFER_GAP_TAIL = math.log(2.0)
INFER_GAP_TAIL_TEXT = _T = "ln 2"  # how labels name it


# The inference–trainer gap Δ_t = infer_gap_t over the positions with both log-probs (finite) that the loss mask
# keeps where the response has one (data/metrics/token.py); its tail: |Δ_t| > INFER_GAP_TAIL (ln 2).
# fmt: off
_GAP_COLUMNS = (  # key, label, description, fmt, signed, exported, table, from_tokens, range filter (key, at)
    ("infer_gap_n", "tokens with both log-probs (trainer, inference)", "positions Δ counts", "int", False, 0, 0, 17, None),
    ("infer_gap_tail_n", "tokens in the gap's tail", f"positions with |Δ_t| > {_T}", "int", False, 0, 0, 18, None),
    ("infer_gap_abs_mean", "gap mean |Δ| (trainer − inference)", "mean_t |Δ_t|", "num", False, 14, 12, 19, ("gap", 14)),
    ("infer_gap_abs_max", "gap max |Δ| (trainer − inference)", "max_t |Δ_t|", "num", False, 15, 13, 20, None),
    ("infer_gap_tail_share", f"gap tail share (|Δ| > {_T})", f"share of positions with |Δ_t| > {_T}",
     "share", False, 16, 14, 21, ("tail", 15)),
    ("infer_gap_first_tail", "first gap tail token (position, from 0)",
     f"first position with |Δ_t| > {_T} among the response's tokens; null when none", "int", False, 17, 15, 22, None),
    ("infer_gap_mean", "gap mean Δ (log of the geometric-mean ratio)", "mean_t Δ_t", "num", True, 0, 0, 23, None),
    ("infer_gap_max", "gap max Δ (largest log-ratio)", "max_t Δ_t", "num", True, 0, 0, 24, None),
)
# fmt: on


def _gap_metric(key, label, description, fmt, signed, exported, table, from_tokens, range_filter) -> Metric:
    """One row of :data:`_GAP_COLUMNS`: a stored per-response column (the counts only identify)."""
    unit = {"int": "tokens", "num": "nats"}.get(fmt, "") if key != "infer_gap_first_tail" else ""
    level = ROW if key.endswith("_n") else "response"
    rk, at = range_filter or (None, 0)
    return Metric(
        key,
        label,
        description,
        signed,
        level,
        unit,
        fmt,
        stored=True,
        exported=exported,
        range_key=rk,
        range_at=at,
        table=table,
        from_tokens=from_tokens,
    )


# The critic's sums of a response (key: label): its positions with a finite value error, those of them whose
# return is the file's own (``returns``, not γ = 1), and the sums of r = return and e = value − return there.
_CRITIC_SUMS = {
    **{
        "critic_n": "positions with a value and a return",
        "critic_file_n": "of them, with the file's returns",
    },
    **{"return_sum": "Σ r", "return_sq_sum": "Σ r²", "value_error_sum": "Σ e", "value_error_sq_sum": "Σ e²"},
    "value_error_abs_sum": "Σ |e|",
}

# The critic's sums of one response over its positions with both a value and a return (value_error_t
# = value_t − return_t finite), so that a step's critic health pools every position exactly.
CRITIC_SUM_METRICS: list[Metric] = [
    Metric(
        k,
        lab,
        f"{lab}: a critic's sum of the response (see data/metrics/critic.py)",
        level=ROW,
        fmt="int" if k.endswith("_n") else "num",
        stored=True,
        from_tokens=at,
    )
    for at, (k, lab) in enumerate(_CRITIC_SUMS.items(), start=10)
]

GAP_METRICS: list[Metric] = [_gap_metric(*row) for row in _GAP_COLUMNS]
