"""AReaL: each accepted trajectory appended to ``{log_path}/rollout/{tail_version}/{task_id}.jsonl``
(``eval-rollout/`` for evaluation, kept apart as a validation run), one line per sample: ``task_id``,
``sample_idx``, ``seqlen``, ``prompt_len``, ``head_version``, ``tail_version``, ``reward``, ``prompt`` and
``completion`` decoded with special tokens kept (``areal/infra/workflow_executor.py``,
``WorkflowExecutor._dump_trajectory``). The step is the policy version that finished the sample
(``tail_version``, the folder), never the file's number, which is the task id; the task's samples are
its GRPO group; the completion's length in tokens is ``seqlen - prompt_len``."""

from __future__ import annotations

from data.schema.chat import RESPONSE_LENGTH
from data.schema.dialects.base import SURE, Dialect, merge_aliases, step_from_path
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

ALIASES = merge_aliases(CONTRACT_ALIASES, {"response": ("completion",)})
# Fields no other trainer writes together: the policy versions of a sample's first and last tokens.
_OWN = frozenset({"head_version", "tail_version"})
_ALSO = frozenset({"task_id", "sample_idx", "seqlen", "prompt_len"})
GROUP = "group_id"  # the column a group is read from (see data.metrics.group)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def line(obj: dict, reading=None) -> dict:
    """The version that finished the sample as its step, its task as its group, its length in tokens."""
    obj = DIALECT.apply_aliases(obj)
    if obj.get("step") is None and _whole(obj.get("tail_version")):
        obj["step"] = obj["tail_version"]
    if obj.get(GROUP) is None and obj.get("task_id") is not None:
        obj[GROUP] = obj["task_id"]
    seqlen, prompt_len = obj.get("seqlen"), obj.get("prompt_len")
    if _whole(seqlen) and _whole(prompt_len) and seqlen >= prompt_len:
        obj[RESPONSE_LENGTH] = seqlen - prompt_len
    return obj


def recognise(rel: str, fields: frozenset[str]) -> int:
    """Sure on the version fields, or on the sample fields in AReaL's version-folder layout."""
    if not {"prompt", "completion"} <= fields:
        return 0
    if _OWN <= fields:
        return SURE + 10
    parts = rel.split("/")
    in_layout = (
        len(parts) >= 3 and parts[-3] in ("rollout", "eval-rollout") and step_from_path(rel) is not None
    )
    return SURE + 5 if in_layout and _ALSO <= fields else 0


DIALECT = Dialect(
    name="areal",
    title="AReaL rollout dump",
    description="rollout/{version}/{task_id}.jsonl: one sample a line, prompt, completion, reward, the policy "
    "versions that generated it",
    recognise=recognise,
    aliases=ALIASES,
    mapping=(
        "prompt → prompt, completion → response (decoded with special tokens kept)",
        "tail_version (the version folder) → step: the policy version that finished the sample; the file's "
        "number is the task id, not a step",
        "task_id → the group (the task's samples); seqlen − prompt_len → response length in tokens",
        "reward → reward; head_version, sample_idx, seqlen, prompt_len kept as columns",
    ),
    line=line,
    fields={
        "prompt": "prompt",
        "response": "completion",
        "reward": "reward",
        "step": "folder",
        "group": "task_id",
    },
)
