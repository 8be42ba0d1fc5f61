"""miles: what ``--dump-details DIR`` writes that is not a torch pickle. ``DIR/trajectory/{rollout_id}.jsonl``
(``eval_{rollout_id}.jsonl`` for evaluations; ``miles/ray/rollout/debug_data.py`` ``trajectory_rows`` and
``save_debug_trajectory_data``): one line per sample that recorded its conversation (multi-turn and session
rollouts): ``sample_index``, ``group_index``, ``status``, ``reward`` (null where the sample's reward is not a
number), ``prompt`` (text or chat messages) and ``messages``, the whole conversation (the prompt's messages,
then the model's turns with the tool results between them). The rollout id is the training step.

Joined to each line by its ``sample_index``: ``dashboard_columns/rollout_{id}.parquet`` (``eval_{id}`` for
evaluations; ``debug_data.py`` ``save_dashboard_columns``, written right after the trajectory file), the
per-token mirror of the rollout side, one row per sample: ``tokens`` (prompt and response ids),
``response_length``, ``total_length``, ``loss_mask`` and ``rollout_log_probs`` (over the response). The
response's tokens are the last ``response_length`` of ``tokens``, with its loss mask (0 on a tool's result
inside a multi-turn response) and the inference engine's log-probs as per-token fields.

Not read: ``rollout_data/{id}.pt`` and ``train_data/{id}_{rank}.pt``, torch pickles (never unpickled: a pickle
runs code): the texts and rewards of single-turn runs, which write no trajectory line (their Parquet rows have
no line to join), and the trainer's per-token log-probs, reference log-probs, entropy and advantages, so that
miles' own ``lp_diff`` and ``imp_ratio`` (trainer − rollout log-prob, ``miles/dashboard/dump_reader.py``
``tokens``) cannot be shown."""

from __future__ import annotations

import re

import polars as pl

from data.schema.contract import BadLine
from data.schema.dialects.base import LINE_NOTES, Companion, Dialect, Reading

SIDECAR_FIELDS = frozenset({"sample_index", "group_index", "status", "messages"})
_FILE = re.compile(r"(^|/)trajectory/(eval_)?\d+\.jsonl$")


# What --dump-details writes beside the trajectories that is named like rollouts but is not: the per-token
# mirror of each rollout (miles/dashboard/dump_reader.py: dashboard_columns/rollout_{id}.parquet) and the
# dashboard's telemetry streams and cache (miles/dashboard/store.py: dashboard/{stream}/{hour}.jsonl,
# dashboard/{stream}.jsonl; dump_reader.py: dashboard/cache/{stem}.parquet), each at the top of the folder.
_COLUMNS = re.compile(r"^dashboard_columns/rollout_[^/]+\.parquet$")
# A trajectory file's rollout id (eval_ kept), which names its per-token Parquet.
_STEM = re.compile(r"(^|/)trajectory/((?:eval_)?\d+)\.jsonl$")
# The per-token Parquet's columns (debug_data.py save_dashboard_columns' schema).
COLUMNS = ("sample_index", "response_length", "total_length", "tokens", "loss_mask", "rollout_log_probs")
KEY = "sample_index"


def companion_path(rel: str) -> str | None:
    """The per-token Parquet of a trajectory file: ``trajectory/3.jsonl`` → ``dashboard_columns/rollout_3.parquet``
    (in the folder above ``trajectory/``, as ``--dump-details`` lays them out); None for another file."""
    m = _STEM.search(rel)
    if m is None:
        return None
    return f"{rel[: m.start(2) - len('trajectory/')]}dashboard_columns/rollout_{m.group(2)}.parquet"


def companion_table(frame: pl.DataFrame) -> dict:
    """The per-token Parquet's rows by sample_index: the response's token ids (the last ``response_length``
    of ``tokens``), its loss mask and rollout log-probs."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"no column {', '.join(missing)} (miles writes {', '.join(COLUMNS)})")
    out = {}
    for row in frame.select(COLUMNS).iter_rows(named=True):
        tokens, n = row["tokens"] or [], row["response_length"]
        if not isinstance(row[KEY], int) or not isinstance(n, int) or not 0 <= n <= len(tokens):
            continue
        out[row[KEY]] = {
            "ids": tokens[len(tokens) - n :],
            "loss_mask": row["loss_mask"],
            "rollout_log_probs": row["rollout_log_probs"],
        }
    return out


def _join(obj: dict, reading: Reading) -> None:
    """The line's per-token fields from the per-token Parquet's row of its sample_index (a note where the
    Parquet has none)."""
    key = obj.get(KEY)
    got = reading.joined.take(key) if reading.joined is not None else None
    if got is None:
        if reading.joined is not None:
            note = f"no row of sample_index {key!r} in {reading.joined.file}: no per-token fields"
            obj[LINE_NOTES] = [*obj.get(LINE_NOTES, []), note]
        return
    obj["response_tokens"] = reading.token_names(got["ids"])
    for name in ("loss_mask", "rollout_log_probs"):
        if isinstance(got[name], list) and got[name]:
            obj[name] = got[name]


def auxiliary(rel: str, names=()) -> str | None:
    """Why the file at ``rel`` (its path inside the run) is one of miles' dashboard files and not rollouts,
    or None."""
    if _COLUMNS.match(rel):
        return (
            "miles' per-token mirror of a rollout (tokens, loss mask, rollout log-probs): joined to "
            "trajectory/{id}.jsonl's lines by sample_index where that file exists; no reward, no text of its own"
        )
    if rel.startswith("dashboard/"):
        return "miles' dashboard telemetry (--use-miles-dashboard)"
    return None


def _response(prompt, messages) -> list:
    """The messages after the prompt: after the prompt's own messages where the conversation starts with
    them, else from the first assistant message (a prompt given as text)."""
    if isinstance(prompt, list) and messages[: len(prompt)] == prompt:
        return messages[len(prompt) :]
    first = next(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"), None
    )
    return [] if first is None else messages[first:]


def line(obj: dict, reading: Reading | None = None) -> dict:
    """One sidecar row onto the contract: the response is the conversation after the prompt (an empty one
    for a sample that stopped before the model spoke), the group its group_index."""
    messages = obj.pop("messages", None)
    if not isinstance(messages, list):
        raise BadLine("field 'messages' is not a list of chat messages (miles' trajectory sidecar)")
    if obj.get("reward") is None:
        raise BadLine("field 'reward' is null: miles writes null where the sample's reward is not a number")
    rest = _response(obj.get("prompt"), messages)
    obj["response"] = rest if rest else ""
    if "group_id" not in obj:
        obj["group_id"] = obj.pop("group_index", None)
    if reading is not None:
        _join(obj, reading)
    return obj


def recognise(rel: str, fields: frozenset[str]) -> int:
    if not SIDECAR_FIELDS <= fields:
        return 0
    return 40 + 5 * bool(_FILE.search(rel))


DIALECT = Dialect(
    name="miles",
    title="miles --dump-details trajectory/{rollout_id}.jsonl",
    description="one sample a line: prompt, the whole conversation, reward, group_index, status",
    recognise=recognise,
    mapping=(
        "prompt → prompt; messages after the prompt → response (the model's turns with the tool results between "
        "them; length and repetition count the model's turns)",
        "reward → reward (null, for a reward that is not a number: the line is not read, and says why)",
        "group_index → group_id; the file's rollout id ({rollout_id}.jsonl) → step; eval_{id}.jsonl → validation, "
        "step 0 (its name gives no step the board reads)",
        "dashboard_columns/rollout_{id}.parquet joined by sample_index: the last response_length of tokens → the "
        "response's tokens (their ids, or their text with a tokenizer.json); loss_mask, rollout_log_probs per token",
        "not read: rollout_data/*.pt, train_data/*.pt (torch pickles, never unpickled): single-turn samples' texts, "
        "the trainer's log-probs, ref log-probs, entropy, advantages (so no lp_diff / imp_ratio)",
    ),
    line=line,
    stepless=True,
    companion=Companion(
        path=companion_path,
        key=KEY,
        table=companion_table,
        what="miles' dashboard_columns/rollout_{id}.parquet by sample_index; a row with no line is a sample "
        "without a conversation, whose text is only in rollout_data/{id}.pt, a torch pickle, not read",
    ),
)
