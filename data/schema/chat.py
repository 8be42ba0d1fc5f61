"""Chat messages (OpenAI's chat format, as TRL's conversational datasets and agent frameworks log them) and
flat chat-template strings, rendered as the text the board shows and as the model's own text."""

from __future__ import annotations

import json
import re

import polars as pl


def _part_text(part) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return part["text"]
    kind = part.get("type") if isinstance(part, dict) else None
    return f"[{kind if isinstance(kind, str) else 'part'}]"


def _content_text(content) -> str | None:
    """A message's content as text: a string as it is, a list of parts one part a line, null as nothing;
    None for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(p) for p in content)
    return None


def call_text(name, args) -> str:
    """One tool call as the board shows it: ``[call name(arguments)]`` (arguments given as an object, not
    OpenAI's string, as JSON)."""
    if not isinstance(args, str):
        args = "" if args is None else json.dumps(args, ensure_ascii=False)
    return f"[call {name if isinstance(name, str) else '?'}({args})]"


def _calls_text(calls) -> str:
    """An assistant message's tool calls (OpenAI's chat format) as text, ``[call name(arguments)]`` a line.
    An entry may be the call object or that object serialised as a JSON string (verifiers writes them so)."""
    out = []
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, str):
            try:
                call = json.loads(call)
            except ValueError:
                out.append(f"[call {call}]")
                continue
        f = call.get("function") if isinstance(call, dict) else None
        if isinstance(f, dict):
            out.append(call_text(f.get("name"), f.get("arguments")))
    return "\n".join(out)


# The role of the messages the model wrote; every other role (system, user, tool, environment) is not.
MODEL_ROLE = "assistant"


def _turns(value) -> list[tuple[str | None, str]] | None:
    """``[(role, text)]`` of chat messages, or None when ``value`` is not chat messages (see
    :func:`messages_text`). No message at all is none: an empty conversation (verifiers 0.1.5 writes
    ``"completion": []`` where the environment asked nothing of the model)."""
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        return None
    turns = []
    for m in value:
        role, text = m.get("role"), _content_text(m.get("content"))
        if (role is not None and not isinstance(role, str)) or text is None:
            return None
        calls = _calls_text(m.get("tool_calls"))
        turns.append((role, f"{text}\n{calls}" if text and calls else text or calls))
    if turns and all(role is None for role, _ in turns) and all(m.get("content") is None for m in value):
        return None
    return turns


def messages_text(value) -> str | None:
    """The text of chat messages given where a text is expected (a prompt, response or reference response
    logged as the list a chat template takes: ``[{"role": "user", "content": "..."}, ...]``), else None.

    One message gives its content; several give each as ``role: content``, separated by a blank line (so
    that tool and environment results between the model's turns are marked as such). A content given as a
    list of parts gives the text of each part on its own line (``[image]`` and the like for parts without
    text); a null content gives nothing; tool calls (objects or JSON strings) follow as
    ``[call name(arguments)]``. Anything but a non-empty list of objects with a string ``role`` or a
    ``content`` is not chat messages.
    """
    turns = _turns(value)
    if turns is None:
        return None
    if len(turns) == 1:
        return turns[0][1]
    return "\n\n".join(f"{role}: {text}" if role else text for role, text in turns)


def messages_own(value) -> str | None:
    """What the model itself wrote in chat messages: the text and tool calls of the assistant messages, a
    blank line apart (the length and repetition of a multi-turn response count only these); None when no
    message has the assistant's role (then the whole text is the model's)."""
    turns = _turns(value)
    if turns is None or all(role != MODEL_ROLE for role, _ in turns):
        return None
    return "\n\n".join(text for role, text in turns if role == MODEL_ROLE)


# The prompt's preview source, for a prompt given as several chat messages: the content of its last user
# message (the question; a system message shared by every prompt would fill the preview). Set at ingest
# and dropped once the preview is made.
PROMPT_LEAD = "__prompt_lead"
# The model's own text of a response given as turns (see messages_own): its length, repetition and preview
# are counted on it. Set at ingest and dropped once the metrics are derived.
RESPONSE_OWN = "__response_own"
# The response's length in tokens where a dialect knows it without its tokens (AReaL writes seqlen and
# prompt_len, not the tokens): the response length metric where no token array gives one.
RESPONSE_LENGTH = "__response_length"


def messages_lead(value) -> str | None:
    """The content of the last user message with text (else of the last message) of several chat
    messages; None for one message or for anything :func:`messages_text` does not take. A user message
    without text (an agent's conversation so far may end in one) does not make a blank preview."""
    if messages_text(value) is None or len(value) < 2:
        return None
    users = [m for m in value if m.get("role") == "user" and (_content_text(m.get("content")) or "").strip()]
    return _content_text((users or value)[-1].get("content"))


# ---- flat chat-template strings ---------------------------------------------------------------------
# A conversation rendered by a chat template and decoded into one string. With special tokens skipped
# (veRL's rollout dumps), Qwen's ChatML leaves each turn as its role on a line of its own:
# "system\n…\nuser\n…\nassistant\n…". The other templates keep their markers.
_ROLE_LINE = re.compile(r"(?:^|\n)(system|user|assistant|tool)\n")
TOOL_RESPONSE = "<tool_response>"


def split_flat_turns(text: str, first_role: str = MODEL_ROLE) -> list[dict]:
    """A flat chat-template string with special tokens skipped (``…\\nuser\\n…\\nassistant\\n…``) as chat
    messages; the text before its first role line has ``first_role`` (a response's first turn is the
    model's). A user turn that holds only tool responses (``<tool_response>…``, how Qwen's template passes
    tool results) is the tool's."""
    out = []
    pos, role = 0, first_role
    for m in _ROLE_LINE.finditer(text):
        out.append({"role": role, "content": text[pos : m.start()]})
        pos, role = m.end(), m.group(1)
    out.append({"role": role, "content": text[pos:]})
    for msg in out:
        if msg["role"] == "user" and msg["content"].lstrip().startswith(TOOL_RESPONSE):
            msg["role"] = "tool"
    return [m for k, m in enumerate(out) if k or m["content"]]


# The last user turn of a prompt rendered by a chat template (a system text every prompt shares would fill
# its preview): per template, a literal marker that it is one and the pattern of its last user turn.
_TEMPLATES = (
    ("<|im_start|>user", r"(?s)^.*<\|im_start\|>user\n(.*?)(?:<\|im_end\|>.*)?$"),  # ChatML (Qwen)
    (
        "<|start_header_id|>user",  # Llama 3
        r"(?s)^.*<\|start_header_id\|>user<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>.*)?$",
    ),
    ("<start_of_turn>user", r"(?s)^.*<start_of_turn>user\n(.*?)(?:<end_of_turn>.*)?$"),  # Gemma
    ("<｜User｜>", r"(?s)^.*<｜User｜>(.*?)(?:<｜Assistant｜>.*)?$"),  # DeepSeek
    ("[INST]", r"(?s)^.*\[INST\]\s*(.*?)\s*(?:\[/INST\].*)?$"),  # Mistral
)
# ChatML with its special tokens skipped (veRL): a role on the first line and a user turn on a line of its own.
_FLAT_CHATML = r"(?s)^(?:.*\n)?user\n(.*?)(?:\nassistant\n.*|\nassistant)?$"


def template_lead(prompts: pl.Series, col: pl.Expr) -> pl.Expr | None:
    """The last user turn of each prompt (``col``, whose values are ``prompts``) that a chat template
    rendered (ChatML, Llama 3, Gemma, DeepSeek, Mistral, or ChatML with its special tokens skipped), null
    for the others; None when no prompt of ``prompts`` is one (nothing to compute)."""
    leads = [
        col.str.extract(pattern, 1)
        for marker, pattern in _TEMPLATES
        if prompts.str.contains(marker, literal=True).any()
    ]
    flat = prompts.str.starts_with("system\n") | prompts.str.starts_with("user\n")
    if flat.any():
        starts = col.str.starts_with("system\n") | col.str.starts_with("user\n")
        leads.append(pl.when(starts).then(col.str.extract(_FLAT_CHATML, 1)))
    return pl.coalesce(leads) if leads else None
