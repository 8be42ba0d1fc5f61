"""Every column of a run's responses and every metric the app shows, once: key, exact UI label, unit,
display format, sign, level, and where the column goes (the store's scalars, the export, a range filter).

The store's scalar columns (``data.store.layout.SCALAR_CORE``), the export's columns
(``data.export.EXPORT_COLUMNS``), the range filters' URL keys (``data.queries.RANGE_COLUMNS``) and the
names a file's own field may not take (``data.schema.contract.RESERVED``) are derived from this table, so
a new metric is one entry here plus its expression (in :mod:`data.metrics.response` or ``step``).
"""

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
    ("infer_gap_abs_mean", "gap mean |Δ| (trainer − inference)", "mean_t |Δ_t|", "num", False, 14, 12, 19, ("gap", 6)),
    ("infer_gap_abs_max", "gap max |Δ| (trainer − inference)", "max_t |Δ_t|", "num", False, 15, 13, 20, None),
    ("infer_gap_tail_share", f"gap tail share (|Δ| > {_T})", f"share of positions with |Δ_t| > {_T}",
     "share", False, 16, 14, 21, ("tail", 7)),
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
        key, label, description, signed, level, unit, fmt, True, exported, rk, at, table, from_tokens
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

COLUMNS: dict[str, Metric] = {
    m.key: m
    for m in [
        # Per token
        Metric(
            "token_reward",
            "token reward",
            "per-token reward used in training (KL penalty + reward)",
            True,
            "token",
        ),
        Metric("value", "critic value", "critic value at the token", True, "token"),
        Metric("prob", "probability (policy)", "exp(logprob)", False, "token"),
        Metric("ref_prob", "probability (reference)", "exp(ref_logprob)", False, "token"),
        Metric("logprob", "log-prob (policy)", "policy log-probability of the token", False, "token"),
        Metric(
            "ref_logprob", "log-prob (reference)", "reference log-probability of the token", False, "token"
        ),
        Metric("log_ratio", "log-ratio log π − log π_ref", "logprob − ref_logprob", True, "token"),
        Metric("kl", "KL (k3)", "exp(r) − 1 − r, r = ref_logprob − logprob", False, "token"),
        Metric(
            "infer_gap",
            "trainer − inference log-prob",
            "logprob (the trainer's) − the inference engine's log-prob of the token (generation_logprobs, "
            "rollout_log_probs or inference_logprobs): log π_trainer − log π_inference",
            True,
            "token",
            unit="nats",
        ),
        Metric(
            "imp_ratio",
            "importance ratio π_trainer / π_inference",
            "exp(trainer − inference log-prob): miles' imp_ratio (miles/dashboard/dump_reader.py), prime-rl's "
            "importance_ratio (prime_rl/trainer/rl/loss.py)",
            False,
            "token",
        ),
        Metric(
            "mismatch_kl",
            "mismatch KL (trainer ‖ inference)",
            "ratio − log ratio − 1 with ratio = exp(trainer − inference log-prob): prime-rl's mismatch_kl "
            "(prime_rl/trainer/rl/loss.py compute_importance_ratio_and_mismatch_kl)",
            False,
            "token",
        ),
        Metric(
            "return",
            "return",
            "the trainer's own return of the token where the file has one (its `returns`), else the sum of the "
            "token rewards from this token to the end (γ = 1); see return_label",
            True,
            "token",
        ),
        Metric(
            "value_error",
            "value error (value − return)",
            "critic value minus return (the trainer's returns where given, else γ = 1)",
            True,
            "token",
        ),
        # The columns of one response, in the order of the store's scalars
        Metric(
            "sample_id",
            "sample id",
            "stable id of the response: its file's prefix and line",
            level=ROW,
            fmt="text",
            stored=True,
            exported=1,
        ),
        Metric(
            "source",
            "file",
            "the rollout file, as a path inside the run",
            level=ROW,
            fmt="text",
            stored=True,
            exported=12,
        ),
        Metric(
            "line",
            "line",
            "the response's line in its file (from 1)",
            level=ROW,
            fmt="int",
            stored=True,
            exported=13,
        ),
        Metric(
            "source_line",
            "file:line",
            "where the response is in the run's files: its file and line (from 1)",
            level=ROW,
            fmt="text",
        ),
        Metric("part", "part", "the store's part holding the response", level=ROW, fmt="int", stored=True),
        Metric("row", "row", "the response's row in its part", level=ROW, fmt="int", stored=True),
        Metric(
            "step",
            "step",
            "training step",
            level=ROW,
            fmt="step",
            stored=True,
            exported=2,
            table=1,
        ),
        Metric(
            "reward",
            "reward",
            "sequence reward from the reward model / verifier",
            True,
            stored=True,
            exported=3,
            range_key="reward",
            range_at=1,
            table=2,
        ),
        Metric(
            "ref_reward",
            "reference reward",
            "reward of the reference model's response",
            True,
            stored=True,
            exported=4,
            range_key="ref",
            range_at=5,
            table=3,
        ),
        Metric(
            "reward_gain",
            "reward gain (reward − ref reward)",
            "reward − ref_reward",
            True,
            stored=True,
            exported=5,
            range_key="gain",
            range_at=2,
            table=4,
        ),
        Metric(
            "response_length",
            "response length (tokens, pads excluded)",
            "tokens without pad tokens",
            unit="tokens",
            fmt="int",
            stored=True,
            exported=6,
            table=5,
            from_tokens=1,
        ),
        Metric(
            "response_chars",
            "response length (characters, pads excluded)",
            "characters without pad tokens",
            unit="characters",
            fmt="int",
            stored=True,
            table=6,
        ),
        Metric(
            "length",
            "response length (tokens, or characters where a response has no token arrays)",
            "response_length where the response has token arrays, else response_chars (evaluation dumps and most "
            "trainers' files have none): what the length filter (len_min / len_max) compares; computed when read",
            fmt="int",
            range_key="len",
            range_at=4,
        ),
        Metric(
            "n_kl_tokens",
            "tokens with both log-probs",
            "positions where both log-probs are present and finite",
            level=ROW,
            unit="tokens",
            fmt="int",
            stored=True,
            from_tokens=2,
        ),
        Metric(
            "log_ratio_sum",
            "log-ratio sum",
            "Σ_t (logprob_t − ref_logprob_t)",
            True,
            unit="nats",
            stored=True,
            exported=8,
            from_tokens=3,
        ),
        Metric(
            "log_ratio_mean",
            "log-ratio mean per token",
            "mean_t (logprob_t − ref_logprob_t)",
            True,
            unit="nats",
            stored=True,
            exported=7,
            table=9,
            from_tokens=5,
        ),
        Metric(
            "kl_sum",
            "KL sum (k3)",
            "Σ_t k3_t",
            False,
            unit="nats",
            stored=True,
            exported=10,
            table=8,
            from_tokens=4,
        ),
        Metric(
            "kl_mean",
            "KL mean per token (k3)",
            "mean_t k3_t",
            False,
            unit="nats",
            stored=True,
            exported=9,
            range_key="kl",
            range_at=3,
            table=7,
            from_tokens=6,
        ),
        Metric(
            "value_error_mean",
            "value error mean (value − return)",
            "mean_t (value_t − return_t)",
            True,
            stored=True,
            from_tokens=7,
        ),
        Metric(
            "value_error_abs_mean",
            "value error mean |value − return|",
            "mean_t |value_t − return_t|",
            False,
            stored=True,
            exported=11,
            table=10,
            from_tokens=8,
        ),
        Metric(
            "token_reward_sum",
            "token reward sum",
            "Σ_t token_reward_t",
            True,
            stored=True,
            from_tokens=9,
        ),
        # The critic's sums of one response over its positions with both a value and a return (value_error_t
        # = value_t − return_t finite), so that a step's critic health pools every position exactly.
        *[
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
        ],
        *(_gap_metric(*row) for row in _GAP_COLUMNS),
        Metric(
            "repetition",
            "repetition (share of repeated 3-grams)",
            "1 − distinct 3-grams / 3-grams of the response, of its tokens, else characters (scripts without "
            "spaces) or words: repetition_unit says which (see data/metrics/degeneration.py)",
            stored=True,
            table=11,  # a reward-hacking point opens its step sorted by it
        ),
        Metric(
            "repetition_unit",
            "repetition counted in",
            "tokens, characters or words",
            ROW,
            fmt="text",
            stored=True,
        ),
        Metric(
            "length_ratio",
            "length ÷ step median",
            "response length over the median length of its step (tokens, else characters); computed when read",
        ),
        Metric(
            "prompt_key",
            "prompt key",
            "hash of the prompt without pads and surrounding white space",
            level=ROW,
            fmt="text",
            stored=True,
        ),
        Metric(
            "prompt_preview",
            "prompt",
            "the start of the prompt (its question, for chat messages)",
            level=ROW,
            fmt="text",
            stored=True,
        ),
        Metric(
            "response_preview",
            "response",
            "the start of the response without pads",
            level=ROW,
            fmt="text",
            stored=True,
        ),
        Metric(
            "has_tokens",
            "has token fields",
            "whether any token array is present",
            level=ROW,
            fmt="text",
            stored=True,
        ),
        # Against the reference (per step and per prompt; see data/metrics/reference.py)
        Metric(
            "win_rate",
            "win rate (reward > reference reward)",
            "share of the responses compared with their reference (both rewards finite) whose reward is higher",
            False,
            "step",
            fmt="share",
        ),
        Metric(
            "tie_rate",
            "tie rate (reward = reference reward)",
            "share of the responses compared with their reference (both rewards finite) whose reward is equal",
            False,
            "step",
            fmt="share",
        ),
        # Reward-hacking aids (see data/metrics/degeneration.py and data/signals.py)
        Metric(
            "truncated",
            "no end token (truncated)",
            "the response does not end with an end token (RLBOARD_END_TOKENS): its last token that is not a "
            "pad, else its text's end, pads and trailing white space aside; it was cut at the length limit",
            level="response",
            fmt="text",
        ),
        # Groups (see data/metrics/group.py)
        Metric(
            "learning_signal",
            "learning signal (group rewards differ)",
            "whether the rewards of the response's group (the responses of one step that share a group id, "
            "else a prompt) differ: a group whose rewards are all equal has every advantage 0 and teaches "
            "GRPO / RLOO nothing; none for a group of one",
            level="group",
            fmt="text",
        ),
        # Shown only (read for the rows on screen, never stored: see data/response_columns.py)
        Metric(
            "end",
            "end (ended / truncated)",
            "ended: the response ends with an end token; truncated: it does not (cut at the length limit); "
            "empty where a run cannot tell (none of its responses ends with one)",
            level="shown",
            fmt="text",
        ),
        Metric(
            "repetition_mean",
            "repetition, step mean (share of repeated 3-grams)",
            "mean repetition of the step's responses of 3 units or more (their units: the summary's repetition_units)",
            False,
            "step",
            fmt="share",
        ),
        Metric(
            "explained_variance",
            "explained variance",
            "1 − Var(return − value) / Var(return), pooled over every position of the step's responses with both "
            "a value and a return (population variances; null under 2 positions or where the returns do not vary)",
            True,
            "step",
        ),
        Metric(
            "value_error_abs_pooled",
            "mean |value − return|",
            "Σ |value_t − return_t| / n over every position of the step's responses with both a value and a return",
            False,
            "step",
        ),
        Metric(
            "kl_top_share",
            "largest response's share of the step's KL",
            "the k3 sum of the step's response with the largest one, over the k3 sum of all the step's positions",
            False,
            "step",
            fmt="share",
        ),
        Metric(
            "truncated_share",
            "truncated (share of responses with no end token)",
            "responses of the step that do not end with an end token, over the step's responses",
            False,
            "step",
            fmt="share",
        ),
        Metric(
            "match_share",
            "share of responses matching the search",
            "responses of the step whose prompt or response the search (q=) matches, over the step's responses",
            False,
            "step",
            fmt="share",
        ),
        Metric(
            "partial_step",
            "partial step",
            "the run's last step when it holds fewer responses than every other step of the run (a run "
            "stopped, or still being written, in the middle of a step; see data/metrics/step.py)",
            False,
            "step",
            fmt="text",
        ),
        # Comparing runs (see data/compare/)
        Metric(
            "samples_seen",
            "responses seen (cumulative)",
            "responses of the run up to and including the step, in step order",
            False,
            "step",
            unit="responses",
            fmt="int",
        ),
        Metric(
            "reward_diff",
            "paired reward difference (A − B)",
            "mean reward of a shared prompt's responses at its paired step in run A minus at its paired step in run B "
            "(the two runs' steps closest to each other: see data.compare.prompts)",
            True,
            "prompt",
        ),
    ]
}


# The metrics (what the UI names and colours), without the columns that only identify a response.
METRICS: dict[str, Metric] = {k: m for k, m in COLUMNS.items() if m.level != ROW}


def stored_columns() -> tuple[str, ...]:
    """The columns of the store's scalars (the narrow in-memory table), in order."""
    return tuple(k for k, m in COLUMNS.items() if m.stored)


def exported_columns() -> tuple[str, ...]:
    """The columns of an export (beside the texts), in order."""
    return _placed("exported")


def _placed(attr: str) -> tuple[str, ...]:
    """The keys of the entries with a place ``attr`` (1 first), in that order."""
    return tuple(
        m.key
        for m in sorted((m for m in COLUMNS.values() if getattr(m, attr)), key=lambda m: getattr(m, attr))
    )


def range_columns() -> dict[str, str]:
    """The range filters in their order: URL prefix (``<prefix>_min`` / ``<prefix>_max``) -> column."""
    return {COLUMNS[k].range_key: k for k in _placed("range_at")}


# The starts of the prompt and the response that the responses grid shows beside the table's values.
PREVIEW_COLUMNS = ("prompt_preview", "response_preview")


def table_columns() -> tuple[str, ...]:
    """The responses table's value columns, in order (those a run has no value in are left out there)."""
    return _placed("table")


def token_aggregates() -> tuple[str, ...]:
    """The per-response aggregates computed from the token arrays at ingest, in the order computed."""
    return _placed("from_tokens")


def response_columns() -> frozenset[str]:
    """Every column of a response the store derives or keeps (a file's field of the same name is renamed)."""
    return frozenset(k for k, m in COLUMNS.items() if m.level in ("response", ROW))


# The length a run is filtered, sorted and drawn by: in tokens, or in characters where it has no token arrays.
LENGTH_TOKENS, LENGTH_CHARS = "response_length", "response_chars"


def length_column(present) -> str:
    """The length column of a run whose columns with a value are ``present``: tokens when it has them,
    else characters (each labelled as such by :func:`label`)."""
    return LENGTH_TOKENS if LENGTH_TOKENS in present or LENGTH_CHARS not in present else LENGTH_CHARS


def label(key: str) -> str:
    """The exact UI label of a metric (falls back to the key for extra columns)."""
    m = METRICS.get(key)
    return m.label if m else key
