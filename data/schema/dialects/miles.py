"""miles: what ``--dump-details DIR`` writes that is not a torch pickle. ``DIR/trajectory/{rollout_id}.jsonl``
(``eval_{rollout_id}.jsonl`` for evaluations; ``miles/ray/rollout/debug_data.py`` ``trajectory_rows`` and
``save_debug_trajectory_data``): one line per sample that recorded its conversation (multi-turn and session
rollouts): ``sample_index``, ``group_index``, ``status``, ``reward`` (null where the sample's reward is not a
number), ``prompt`` (text or chat messages) and ``messages``, the whole conversation (the prompt's messages,
then the model's turns with the tool results between them). The rollout id is the training step.

Not read: ``rollout_data/{id}.pt`` and ``train_data/{id}_{rank}.pt`` (torch pickles: the texts and rewards of
single-turn runs, and the trainer's per-token log-probs, reference log-probs, entropy and advantages), and
``dashboard_columns/rollout_{id}.parquet``, the per-token mirror of the rollout side only (``tokens``,
``loss_mask``, ``rollout_log_probs``), which holds no reward and no text."""

from __future__ import annotations

import re

from data.schema.contract import BadLine
from data.schema.dialects.base import Dialect, Reading

SIDECAR_FIELDS = frozenset({"sample_index", "group_index", "status", "messages"})
_FILE = re.compile(r"(^|/)trajectory/(eval_)?\d+\.jsonl$")


# What --dump-details writes beside the trajectories that is named like rollouts but is not: the per-token
# mirror of each rollout (miles/dashboard/dump_reader.py: dashboard_columns/rollout_{id}.parquet) and the
# dashboard's telemetry streams and cache (miles/dashboard/store.py: dashboard/{stream}/{hour}.jsonl,
# dashboard/{stream}.jsonl; dump_reader.py: dashboard/cache/{stem}.parquet), each at the top of the folder.
_COLUMNS = re.compile(r"^dashboard_columns/rollout_[^/]+\.parquet$")


def auxiliary(rel: str, names=()) -> str | None:
    """Why the file at ``rel`` (its path inside the run) is one of miles' dashboard files and not rollouts,
    or None."""
    if _COLUMNS.match(rel):
        return (
            "miles' per-token mirror of a rollout (tokens, loss mask, rollout log-probs: no reward, no text)"
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
        "not read: rollout_data/*.pt, train_data/*.pt (torch pickles) and dashboard_columns/*.parquet (per-token "
        "rollout columns without reward or text)",
    ),
    line=line,
    stepless=True,
)
