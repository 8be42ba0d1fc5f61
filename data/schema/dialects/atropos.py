"""Atropos: the scored groups an environment writes with ``--env.data_path_to_save_groups`` (its ``process``
command, or while serving a trainer): one line is a ``ScoredDataGroup`` (atroposlib/envs/base.py), the group
of rollouts of one item, each field a list with one entry per rollout: ``tokens`` and ``masks`` (the whole
sequence; a mask is -100 where the trainer does not train, the token id where it does), ``scores``, and,
where the environment gives them, ``messages`` (each rollout's chat messages, or one string), ``advantages``,
``ref_logprobs``, ``inference_logprobs`` (over the whole sequence, 1.0 at prompt positions), ``overrides``;
``generation_params`` and ``group_overrides`` belong to the group. The lines carry no step.

Each rollout is a response (see ``Dialect.rows``), the line its group. The response is the model's turns
(role ``assistant`` or ``agent``, as Atropos' tokenize_for_trainer trains on), with the tool or environment
turns between them; a rollout whose messages are one string (a chat template's text, or base.py's own
fallback: one user message with the decoded sequence) is split at its last assistant header; without
messages the text is the tokens', decoded by a local tokenizer.json or else shown as their ids."""

from __future__ import annotations

import re

from data.schema.chat import RESPONSE_OWN, messages_text
from data.schema.contract import BadLine
from data.schema.dialects.base import Dialect, Reading

TOKENS, MASKS, SCORES, MESSAGES = "tokens", "masks", "scores", "messages"
MASKED = -100  # a mask's value where the trainer does not train (the prompt, tool results)
MODEL_ROLES = ("assistant", "agent")  # atroposlib/utils/tokenize_for_trainer.py UNMASKED_ROLES
# Fields with one entry per rollout (ScoredDataGroup); any other list of that length is taken so too.
PER_ROLLOUT = (
    TOKENS,
    MASKS,
    SCORES,
    MESSAGES,
    "advantages",
    "ref_logprobs",
    "inference_logprobs",
    "overrides",
    "images",
    "distill_token_ids",
    "distill_logprobs",
)
# The whole-sequence arrays cut to the trained positions, and what each becomes: the inference server's
# log-probs are the only policy log-probs Atropos keeps (the contract's logprobs, so that KL to the
# reference is drawn); the advantages stay a per-token field of the trainer's own.
ARRAYS = {"inference_logprobs": "logprobs", "ref_logprobs": "ref_logprobs", "advantages": "advantages"}
LEFT_OUT = ("images",)  # images (base64 or objects): not text the board shows


def rows(obj: dict) -> list[dict]:
    """A group line as one record per rollout: each per-rollout field's entry, the group's own fields
    (generation_params, group_overrides) in every record. A per-rollout field of another length than
    ``scores`` stays whole in every record (a list of lists: named on the runs page as not read); an empty
    one (base.py's collection of a field no rollout gave) is left out."""
    if not isinstance(obj, dict):
        raise BadLine(f"not a JSON object (got {type(obj).__name__})")
    scores = obj.get(SCORES)
    if not isinstance(scores, list) or not scores:
        raise BadLine("field 'scores' is not a non-empty list (an Atropos group has one score per rollout)")
    n = len(scores)
    tokens = obj.get(TOKENS)
    if not isinstance(tokens, list) or len(tokens) != n:
        got = len(tokens) if isinstance(tokens, list) else type(tokens).__name__
        raise BadLine(f"field 'tokens' does not hold one list per score ({n} scores, tokens: {got})")
    shared, split = {}, {}
    for key, v in obj.items():
        if key in LEFT_OUT or (isinstance(v, list) and not v):
            continue
        if (
            isinstance(v, list)
            and len(v) == n
            and (key in PER_ROLLOUT or all(isinstance(x, list) for x in v))
        ):
            split[key] = v
        else:
            shared[key] = v
    return [{**shared, **{key: v[i] for key, v in split.items()}} for i in range(n)]


def _trained(mask, tokens: list) -> list[int] | None:
    """The positions the trainer trains on (mask not -100), or None without a mask of the tokens' length."""
    if not isinstance(mask, list) or len(mask) != len(tokens):
        return None
    return [i for i, m in enumerate(mask) if m != MASKED]


def _tokens_text(ids: list, reading: Reading) -> str:
    """Token ids as text: decoded by the local tokenizer.json, else the ids themselves, space-separated."""
    text = reading.decode(ids)
    return text if text is not None else " ".join(str(i) for i in ids)


# The header after which a chat template's text is the model's turn: ChatML, Llama 3, Gemma, DeepSeek and
# Mistral by their special tokens; only in a text with none of those, ChatML with its special tokens skipped
# and "assistant: " at a line's start (some environments join the messages as "role: content" lines), which
# a model's own text could also hold.
_HEADERS = (
    re.compile(
        r"<\|im_start\|>assistant\n|<\|start_header_id\|>assistant<\|end_header_id\|>\n\n"
        r"|<start_of_turn>model\n|<｜Assistant｜>|\[/INST\]"
    ),
    re.compile(r"(?:^|\n)assistant\n|(?:^|\n)assistant: "),
)
_ENDS = re.compile(
    r"(?:<\|im_end\|>|<\|eot_id\|>|<end_of_turn>|<｜end▁of▁sentence｜>|</s>|<\|endoftext\|>|\s)+$"
)


def split_template(text: str) -> tuple[str, str] | None:
    """A conversation rendered as one string, as ``(prompt, response)``: the text before and after its last
    assistant header (the response without the template's end markers); None without a header or with
    nothing after the last one."""
    last = None
    for headers in _HEADERS:
        last = next(reversed(list(headers.finditer(text))), None)
        if last is not None:
            break
    if last is None:
        return None
    response = _ENDS.sub("", text[last.end() :])
    return (text[: last.start()], response) if response.strip() else None


def _from_messages(msgs) -> dict | None:
    """``prompt``, ``response`` (and the model's own text) of one rollout's messages; None when they give no
    non-empty response (then the tokens' text is the response)."""
    if isinstance(msgs, str):
        split = split_template(msgs)
        return None if split is None else {"prompt": split[0], "response": split[1]}
    if messages_text(msgs) is None:
        return None
    first = next((i for i, m in enumerate(msgs) if m.get("role") in MODEL_ROLES), None)
    if first is None:
        # base.py's fallback (include_messages without messages): one user message holding the decoded
        # sequence, its template included.
        only = msgs[0].get("content") if len(msgs) == 1 else None
        return _from_messages(only) if isinstance(only, str) else None
    response, own = msgs[first:], [m for m in msgs[first:] if m.get("role") in MODEL_ROLES]
    text = messages_text(response)
    if not text or not text.strip():
        return None
    # The response as text (chat.messages_own would count only the assistant's turns, not the agent's).
    out = {"prompt": msgs[:first] or "", "response": text}
    if len(response) > 1:
        out[RESPONSE_OWN] = "\n\n".join(messages_text([m]) for m in own)
    return out


def line(obj: dict, reading: Reading) -> dict:
    """One rollout of a group (see :func:`rows`) onto the contract's fields."""
    tokens, scores = obj.pop(TOKENS, None), obj.pop(SCORES, None)
    mask = obj.pop(MASKS, None)
    obj["reward"] = scores
    ids = tokens if isinstance(tokens, list) else []
    keep = _trained(mask, ids)
    if keep is None:
        keep = list(range(len(ids)))  # no usable mask: every position (said by the mapping)
    own = [ids[i] for i in keep]
    obj["response_tokens"] = reading.token_names(own)
    for name, target in ARRAYS.items():
        values = obj.pop(name, None)
        if isinstance(values, list):
            # Over the whole sequence (as inference_logprobs always is): cut as the tokens are.
            obj[target] = [values[i] for i in keep] if len(values) == len(ids) != len(own) else values
    mapped = _from_messages(obj.pop(MESSAGES, None))
    if mapped is None:
        trained = set(keep)
        prompt_ids = [t for i, t in enumerate(ids) if i not in trained]
        mapped = {"prompt": _tokens_text(prompt_ids, reading), "response": _tokens_text(own, reading)}
    obj.update(mapped)
    return obj


def recognise(rel: str, fields: frozenset[str]) -> int:
    # tokens, masks and scores together: a ScoredDataGroup; no other dialect writes "masks" and "scores".
    return 40 if {TOKENS, MASKS, SCORES} <= fields else 0


DIALECT = Dialect(
    name="atropos",
    title="Atropos scored groups (data_path_to_save_groups)",
    description="one line a scored group: tokens, masks, scores, messages per rollout; a response per rollout",
    recognise=recognise,
    mapping=(
        "each line a group: one response per rollout (scores[i], tokens[i], …), the line its group (group_id)",
        "scores → reward",
        "messages → prompt (the turns before the model's first) and response (the model's turns, role assistant "
        "or agent, with the tool turns between them; length and repetition count the model's turns); one string "
        "→ split at its last assistant header; none → the tokens' text",
        "tokens where masks is not -100 → the response's tokens (their ids, or their text with a tokenizer.json)",
        "inference_logprobs, ref_logprobs, advantages → cut as the tokens: logprobs (the inference server's), "
        "ref_logprobs, advantages",
        "no step in the lines: step 0",
        "images not read",
    ),
    line=line,
    stepless=True,
    rows=rows,
)
