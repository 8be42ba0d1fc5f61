"""Every column of a run's responses and every metric the app shows, once: key, exact UI label, unit,
display format, sign, level, and where the column goes (the store's scalars, the export, a range filter).

The store's scalar columns (``data.store.layout.SCALAR_CORE``), the export's columns
(``data.export.EXPORT_COLUMNS``), the range filters' URL keys (``data.queries.RANGE_COLUMNS``) and the
names a file's own field may not take (``data.schema.contract.RESERVED``) are derived from this table, so
a new metric is one entry here plus its expression (in :mod:`data.metrics.response` or ``step``).
"""

from __future__ import annotations

from data.metrics.families import CRITIC_SUM_METRICS, GAP_METRICS
from data.metrics.group_step import GROUP_STEP_METRICS
from data.metrics.metric import ROW, Metric

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
            scale="log",  # a sparse reward on one token beside KL penalties a hundred times smaller
        ),
        Metric("value", "critic value", "critic value at the token", True, "token"),
        Metric("prob", "probability (policy)", "exp(logprob)", False, "token"),
        Metric("ref_prob", "probability (reference)", "exp(ref_logprob)", False, "token"),
        Metric("logprob", "log-prob (policy)", "policy log-probability of the token", False, "token"),
        Metric(
            "ref_logprob", "log-prob (reference)", "reference log-probability of the token", False, "token"
        ),
        Metric(
            "log_ratio", "log-ratio log π − log π_ref", "logprob − ref_logprob", True, "token", scale="log"
        ),
        Metric("kl", "KL (k3)", "exp(r) − 1 − r, r = ref_logprob − logprob", False, "token", scale="log"),
        Metric(
            "infer_gap",
            "trainer − inference log-prob",
            "logprob (the trainer's) − the inference engine's log-prob of the token (generation_logprobs, "
            "rollout_log_probs or inference_logprobs): log π_trainer − log π_inference",
            True,
            "token",
            unit="nats",
            scale="log",
        ),
        Metric(
            "imp_ratio",
            "importance ratio π_trainer / π_inference",
            "exp(trainer − inference log-prob): miles' imp_ratio (miles/dashboard/dump_reader.py), prime-rl's "
            "importance_ratio (prime_rl/trainer/rl/loss.py)",
            False,
            "token",
            scale="ratio",
        ),
        Metric(
            "mismatch_kl",
            "mismatch KL (trainer ‖ inference)",
            "ratio − log ratio − 1 with ratio = exp(trainer − inference log-prob): prime-rl's mismatch_kl "
            "(prime_rl/trainer/rl/loss.py compute_importance_ratio_and_mismatch_kl)",
            False,
            "token",
            scale="log",
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
            range_key="step",
            range_at=13,
            range_input=False,
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
            range_key="log_ratio_sum",
            range_at=8,
            range_input=False,
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
            range_key="log_ratio",
            range_at=7,
            range_input=False,
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
            range_key="kl_sum",
            range_at=6,
            range_input=False,
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
            range_key="value_error",
            range_at=10,
            range_input=False,
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
            range_key="value_error_abs",
            range_at=9,
            range_input=False,
        ),
        Metric(
            "token_reward_sum",
            "token reward sum",
            "Σ_t token_reward_t",
            True,
            stored=True,
            from_tokens=9,
            range_key="token_reward",
            range_at=11,
            range_input=False,
        ),
        *CRITIC_SUM_METRICS,
        *GAP_METRICS,
        Metric(
            "repetition",
            "repetition (share of repeated 3-grams)",
            "1 − distinct 3-grams / 3-grams of the response, of its tokens, else characters (scripts without "
            "spaces) or words: repetition_unit says which (see data/metrics/degeneration.py)",
            stored=True,
            table=11,  # a reward-hacking point opens its step sorted by it
            range_key="repetition",
            range_at=12,
            range_input=False,
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
        Metric(
            "ends_with_end",
            "ended with a default end token",
            "true: the response ends with one of the board's default end tokens (data.config.DEFAULT_END_TOKENS), "
            "false: it does not (cut), null: pads only; made by ingest with the store's pad tokens, what the "
            "'end' column and the ended / truncated filters read when the board uses those end tokens "
            "(see data/signals.py)",
            level=ROW,
            fmt="text",
            stored=True,
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
        # Shown only, for the rows on screen (from ends_with_end where it was made with the board's end tokens,
        # else from the rows' tokens: see data/response_columns.py and data/signals.py)
        Metric(
            "end",
            "end (ended / truncated)",
            "ended: the response ends with an end token; truncated: it does not (cut at the length limit); "
            "empty where a run cannot tell (none of its responses ends with one)",
            level="shown",
            fmt="text",
        ),
        *GROUP_STEP_METRICS,
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


def range_inputs() -> tuple[str, ...]:
    """The URL prefixes of the range filters whose inputs the responses page always shows, in order (the
    others' only while the URL sets one of their bounds)."""
    return tuple(COLUMNS[k].range_key for k in _placed("range_at") if COLUMNS[k].range_input)


def scatter_axes() -> tuple[str, ...]:
    """The columns the scatter page can draw against each other, in the range filters' order: those of a
    range filter but the step (a box brushed on two of them is two range filters)."""
    return tuple(k for k in _placed("range_at") if COLUMNS[k].level != ROW)


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
