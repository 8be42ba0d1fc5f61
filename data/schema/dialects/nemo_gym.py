"""NeMo Gym: collected rollouts (``ng_collect_rollouts``; a resource server's example_rollouts.jsonl), one a
line: ``responses_create_params`` (the request; ``input`` the chat messages, ``instructions`` a system
text), ``response`` (an OpenAI Responses API object whose ``output[]`` items are ``reasoning``, ``message``,
``function_call`` and ``function_call_output``), ``reward`` and the verifier's own fields. No step: they
are collected rollouts, not a training log."""

from __future__ import annotations

from data.schema.chat import call_text
from data.schema.dialects.base import Dialect, merge_aliases
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

REQUEST, RESPONSE = "responses_create_params", "response"
# The task a rollout is of (nemo_gym/global_config.py: TASK_INDEX_KEY_NAME, stamped on every row by
# ng_collect_rollouts, beside _ng_rollout_index): its rollouts are one group.
TASK_INDEX = "_ng_task_index"
GROUP = "group_id"

# What ng_collect_rollouts writes beside its output ``<out>.jsonl``, each named from the output's stem:
# nemo_gym/rollout_collection.py (materialized_jsonl_fpath), nemo_gym/reward_profile.py (write_to_disk) and
# nemo_gym/path_utils.py (failures_path_for). None of them is a rollout of the run.
SIDE_FILES = {
    "_materialized_inputs.jsonl": "NeMo Gym's materialized inputs of {out}, the requests before rollout",
    "_reward_profiling.jsonl": "NeMo Gym's reward profile of {out}, one summary per task",
    "_failures.jsonl": "NeMo Gym's failed attempts of {out}, kept out of its rollouts and retried",
}


def auxiliary(rel: str, names) -> str | None:
    """Why the file at ``rel`` (its path inside the run) is one of the files ng_collect_rollouts writes
    beside its rollouts and not rollouts itself, or None. ``names``: the names of the files in its folder;
    a file is one only beside the rollouts file it is named from."""
    folder, _, name = rel.rpartition("/")
    for suffix, what in SIDE_FILES.items():
        out = name[: -len(suffix)] + ".jsonl"
        if name.endswith(suffix) and len(name) > len(suffix) and out in names:
            return what.format(out=f"{folder}/{out}" if folder else out)
    return None


def _text(content) -> str:
    """An item's content (a string, or parts such as ``{"type": "output_text", "text": …}``) as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def _item_message(item: dict, role: str) -> dict | None:
    """One Responses API item as a chat message (None for an item that shows nothing): a message as its
    role's (``role`` where it names none), the model's reasoning (its summary or text) and its calls
    (``function_call``, and the API's other ``…_call`` items: by their tool's name, else their type) as its
    turns, each call's output (``…_call_output``) as the tool's."""
    kind = item.get("type")
    if kind == "reasoning":
        text = _text(item.get("content")) or _text(item.get("summary"))
        return {"role": "assistant", "content": f"[reasoning]\n{text}"} if text else None
    if kind == "message" or (kind is None and ("role" in item or "content" in item)):
        return {"role": item.get("role") or role, "content": _text(item.get("content"))}
    if not isinstance(kind, str):
        return None
    if kind.endswith("_call_output"):
        return {"role": "tool", "content": _text(item.get("output"))}
    if kind.endswith("_call"):
        name = item.get("name") if isinstance(item.get("name"), str) else kind  # a web search has none
        args = item.get("arguments", item.get("input", item.get("action")))
        return {"role": "assistant", "content": call_text(name, args)}
    return None


def _items_messages(items: list, role: str) -> list[dict]:
    return [m for item in items if isinstance(item, dict) and (m := _item_message(item, role)) is not None]


def output_messages(items) -> list[dict] | None:
    """A Responses API ``output`` as chat messages (see :func:`_item_message`; a message without a role
    is the model's)."""
    return _items_messages(items, "assistant") if isinstance(items, list) else None


def input_messages(request) -> list[dict] | None:
    """The request's ``input`` as chat messages, after its ``instructions``: a string is one user message;
    items are rendered as the output's are (an agent's conversation so far, such as tau2's, holds the
    earlier ``function_call`` and ``function_call_output`` items, which have no role), a message without a
    role is the user's."""
    if not isinstance(request, dict):
        return None
    given = request.get("input")
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    if not isinstance(given, list):
        return None
    msgs = _items_messages(given, "user")
    if isinstance(request.get("instructions"), str) and request["instructions"]:
        msgs.insert(0, {"role": "system", "content": request["instructions"]})
    return msgs or None


def line(obj: dict, reading=None) -> dict:
    request, response = obj.get(REQUEST), obj.get(RESPONSE)
    prompt = input_messages(request)
    answer = output_messages(response.get("output")) if isinstance(response, dict) else None
    if prompt is None or answer is None:
        return obj
    del obj[REQUEST]
    obj["prompt"], obj["response"] = prompt, answer
    # Of the response object, the model and its token counts; the rest is the API's bookkeeping.
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    details = (
        usage.get("output_tokens_details") if isinstance(usage.get("output_tokens_details"), dict) else {}
    )
    for key, value in (
        ("model", response.get("model")),
        ("output_tokens", usage.get("output_tokens")),
        ("reasoning_tokens", details.get("reasoning_tokens")),
        ("status", response.get("status")),
    ):
        if value is not None and key not in obj:
            obj[key] = value
    if obj.get(GROUP) is None and obj.get(TASK_INDEX) is not None:
        obj[GROUP] = obj[TASK_INDEX]
    return obj


def recognise(rel: str, fields: frozenset[str]) -> int:
    return 30 if {REQUEST, RESPONSE} <= fields else 0


DIALECT = Dialect(
    name="nemo_gym",
    title="NeMo Gym rollouts",
    description="responses_create_params.input (chat), response.output[] (Responses API items), reward; no step",
    recognise=recognise,
    aliases=merge_aliases(CONTRACT_ALIASES),
    mapping=(
        "responses_create_params.input (after instructions) → prompt, previewed by its last user message",
        "response.output[] → response",
        "the items of both alike: reasoning, messages and function calls as the model's turns, "
        "function_call_output as the tool's",
        "_ng_task_index → group_id: the rollouts of one task are a group",
        "response.model, usage.output_tokens, reasoning_tokens, status → columns",
        "no step: step 0",
    ),
    line=line,
    stepless=True,
)
