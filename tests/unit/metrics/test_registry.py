"""The column and metric registry: the lists other modules take from it are exactly what they listed before
(order included), and every entry is complete."""

from __future__ import annotations

from data.export import EXPORT_COLUMNS
from data.metrics import registry
from data.queries import COMPUTED, RANGE_COLUMNS
from data.schema.contract import KNOWN, RESERVED
from data.store.layout import SCALAR_CORE

# The critic's sums of a response (issue 35: a step's explained variance pooled exactly from them).
CRITIC = ("critic_n", "critic_file_n", "return_sum", "return_sq_sum")
CRITIC += ("value_error_sum", "value_error_sq_sum", "value_error_abs_sum")


def test_registry001_derived_lists():
    """The store's scalars, the export's columns and the range filters come from the registry, in order."""
    assert SCALAR_CORE == (
        *("sample_id", "source", "line", "part", "row", "step", "reward", "ref_reward", "reward_gain"),
        *("response_length", "response_chars", "n_kl_tokens", "log_ratio_sum", "log_ratio_mean", "kl_sum"),
        *("kl_mean", "value_error_mean", "value_error_abs_mean", "token_reward_sum", *CRITIC),
        *(
            "infer_gap_n",
            "infer_gap_tail_n",
            "infer_gap_abs_mean",
            "infer_gap_abs_max",
            "infer_gap_tail_share",
        ),
        *("infer_gap_first_tail", "infer_gap_mean", "infer_gap_max"),
        *("repetition", "repetition_unit"),
        *("prompt_key", "prompt_preview", "response_preview", "has_tokens", "ends_with_end"),
    )
    assert EXPORT_COLUMNS == (
        *("sample_id", "step", "reward", "ref_reward", "reward_gain", "response_length", "log_ratio_mean"),
        *("log_ratio_sum", "kl_mean", "kl_sum", "value_error_abs_mean", "source", "line"),
        *("infer_gap_abs_mean", "infer_gap_abs_max", "infer_gap_tail_share", "infer_gap_first_tail"),
    )
    assert RANGE_COLUMNS == {
        "reward": "reward",
        "gain": "reward_gain",
        "kl": "kl_mean",
        "len": "length",  # tokens, or characters where a response has no token arrays
        "ref": "ref_reward",  # a reference-reward bar of the reward page opens its responses
        # The scatter's other axes: a box brushed on two of them is two range filters.
        "kl_sum": "kl_sum",
        "log_ratio": "log_ratio_mean",
        "log_ratio_sum": "log_ratio_sum",
        "value_error_abs": "value_error_abs_mean",
        "value_error": "value_error_mean",
        "token_reward": "token_reward_sum",
        "repetition": "repetition",
        "step": "step",  # a box brushed over a range of steps
        "gap": "infer_gap_abs_mean",
        "tail": "infer_gap_tail_share",
    }
    assert registry.range_inputs() == ("reward", "gain", "kl", "len", "ref", "gap", "tail")
    assert registry.scatter_axes() == tuple(c for c in RANGE_COLUMNS.values() if c != "step")


def test_registry002_entries_complete():
    """Every exported column is stored, every stored column and metric has a label and a known format, and a
    file's field never takes the name of a column the store derives."""
    cols = registry.COLUMNS
    assert set(EXPORT_COLUMNS) <= set(SCALAR_CORE)
    assert all(cols[c].stored or c in COMPUTED for c in RANGE_COLUMNS.values())
    assert all(m.label and m.fmt in {"num", "int", "share", "step", "text"} for m in cols.values())
    assert set(SCALAR_CORE) - set(KNOWN) <= RESERVED and "length_ratio" in RESERVED
    assert registry.label("win_rate") == "win rate (reward > reference reward)"
    assert registry.label("no_such_field") == "no_such_field"


def test_registry003_empty_store_types_are_what_ingest_derives():
    """The scalar columns' types that a store with no usable response is read with (SCALAR_DTYPES) are
    those ingest derives for a part, column for column."""
    import polars as pl

    from data.ingest.parts import build_part, derive_chunk, scalar_columns
    from data.schema import CANONICAL
    from data.store.layout import SCALAR_DTYPES

    empty = pl.DataFrame(schema={**CANONICAL, "line": pl.Int64})
    full = build_part(derive_chunk(empty, ("<pad>",)), "a.jsonl", 1, ("<pad>",))
    assert dict(full.select(scalar_columns(full)).schema) == SCALAR_DTYPES


def test_registry004_table_aggregates_ranges_and_history():
    """The responses table's columns, the token aggregates with their types, the range filters in the order
    the page shows them and a prompt's history columns come from the registry, as they were listed."""
    import polars as pl

    from data.metrics.response import AGGREGATE_COLUMNS
    from data.prompts import HISTORY_COLUMNS
    from data.responses import METRIC_COLUMNS

    assert METRIC_COLUMNS == (
        *("step", "reward", "ref_reward", "reward_gain", "response_length", "response_chars", "kl_mean"),
        *("kl_sum", "log_ratio_mean", "value_error_abs_mean", "repetition"),
        *("infer_gap_abs_mean", "infer_gap_abs_max", "infer_gap_tail_share", "infer_gap_first_tail"),
    )
    assert AGGREGATE_COLUMNS == {
        "response_length": pl.Int64,
        "n_kl_tokens": pl.Int64,
        **dict.fromkeys(("log_ratio_sum", "kl_sum", "log_ratio_mean", "kl_mean"), pl.Float64),
        **dict.fromkeys(("value_error_mean", "value_error_abs_mean", "token_reward_sum"), pl.Float64),
        **{c: pl.Int64 if c.endswith("_n") else pl.Float64 for c in CRITIC},
        **dict.fromkeys(("infer_gap_n", "infer_gap_tail_n"), pl.Int64),
        **dict.fromkeys(("infer_gap_abs_mean", "infer_gap_abs_max", "infer_gap_tail_share"), pl.Float64),
        "infer_gap_first_tail": pl.Int64,
        **dict.fromkeys(("infer_gap_mean", "infer_gap_max"), pl.Float64),
    }
    assert list(AGGREGATE_COLUMNS) == [  # the order response_list_aggregates writes them in
        *("response_length", "n_kl_tokens", "log_ratio_sum", "kl_sum", "log_ratio_mean", "kl_mean"),
        *("value_error_mean", "value_error_abs_mean", "token_reward_sum", *CRITIC),
        *(
            "infer_gap_n",
            "infer_gap_tail_n",
            "infer_gap_abs_mean",
            "infer_gap_abs_max",
            "infer_gap_tail_share",
        ),
        *("infer_gap_first_tail", "infer_gap_mean", "infer_gap_max"),
    ]
    assert set(HISTORY_COLUMNS) >= {"sample_id", "source", "line", "part", "row", "step", "reward", "kl_sum"}
    assert set(HISTORY_COLUMNS) - set(SCALAR_CORE) == {"group_id", "advantage"}


def test_registry005_gap_tail_labels_name_the_one_threshold():
    """The inference–trainer gap's labels name the tail's threshold of data.config (ln 2 by default)."""
    from data.config import INFER_GAP_TAIL_TEXT

    for key in ("infer_gap_tail_n", "infer_gap_tail_share", "infer_gap_first_tail"):
        m = registry.COLUMNS[key]
        assert f"> {INFER_GAP_TAIL_TEXT}" in m.label + m.description, key
