"""Chat messages (OpenAI's chat format, as TRL's conversational datasets and agent frameworks log them)
rendered as the text the board shows."""

from __future__ import annotations

import json


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


def _calls_text(calls) -> str:
    """An assistant message's tool calls (OpenAI's chat format) as text, ``[call name(arguments)]`` a line."""
    out = []
    for call in calls if isinstance(calls, list) else ():
        f = call.get("function") if isinstance(call, dict) else None
        if isinstance(f, dict):
            name, args = f.get("name"), f.get("arguments")
            if not isinstance(args, str):  # arguments given as an object (not OpenAI's string): as JSON
                args = "" if args is None else json.dumps(args, ensure_ascii=False)
            out.append(f"[call {name if isinstance(name, str) else '?'}({args})]")
    return "\n".join(out)


def messages_text(value) -> str | None:
    """The text of chat messages given where a text is expected (a prompt, response or reference response
    logged as the list a chat template takes: ``[{"role": "user", "content": "..."}, ...]``), else None.

    One message gives its content; several give each as ``role: content``, separated by a blank line.
    A content given as a list of parts gives the text of each part on its own line (``[image]`` and the
    like for parts without text); a null content gives nothing; tool calls follow as
    ``[call name(arguments)]``. Anything but a non-empty list of objects with a string ``role`` or a
    ``content`` is not chat messages.
    """
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        return None
    texts = []
    for m in value:
        role, text = m.get("role"), _content_text(m.get("content"))
        if (role is not None and not isinstance(role, str)) or text is None:
            return None
        calls = _calls_text(m.get("tool_calls"))
        texts.append((role, f"{text}\n{calls}" if text and calls else text or calls))
    if all(role is None for role, _ in texts) and all(m.get("content") is None for m in value):
        return None
    if len(texts) == 1:
        return texts[0][1]
    return "\n\n".join(f"{role}: {text}" if role else text for role, text in texts)


# The prompt's preview source, for a prompt given as several chat messages: the content of its last user
# message (the question; a system message shared by every prompt would fill the preview). Set at ingest
# and dropped once the preview is made.
PROMPT_LEAD = "__prompt_lead"


def messages_lead(value) -> str | None:
    """The content of the last user message (else of the last message) of several chat messages; None
    for one message or for anything :func:`messages_text` does not take."""
    if messages_text(value) is None or len(value) < 2:
        return None
    users = [m for m in value if m.get("role") == "user"]
    return _content_text((users or value)[-1].get("content"))
