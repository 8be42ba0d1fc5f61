"""A whole conversation under one key (OpenAI's chat format, as agent frameworks log a trajectory), split
into prompt and response."""

from __future__ import annotations

from data.schema.chat import messages_text

# A whole conversation under one key (OpenAI's chat format, as agent frameworks log a trajectory).
CONVERSATION = "messages"


def split_messages(value) -> tuple[list | None, list | None]:
    """A whole conversation as ``(prompt, response)``: the chat messages before the first assistant
    message, and that message with all that follows (tool results and later turns of a multi-turn
    trajectory); ``(None, None)`` when ``value`` is not chat messages or has no message before an
    assistant one."""
    if messages_text(value) is None:
        return None, None
    first = next((i for i, m in enumerate(value) if m.get("role") == "assistant"), 0)
    return (value[:first], value[first:]) if first else (None, None)
