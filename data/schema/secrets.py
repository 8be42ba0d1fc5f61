"""Secrets in rollout lines: a field named like a key or a password (tau2's config holds the agent's
``llm_args_agent.api_key``) is masked when the line is read, so that no store, page or export ever holds
its value. Only text values are: a list or a number of such a name (``response_tokens``, ``token_rewards``,
``output_tokens``, a ``token`` id) is data."""

from __future__ import annotations

import re

MASK = "[masked]"
# The last segment of a field's name (``config.llm_args_agent.api_key``: ``api_key``), ignoring case.
NAMES = frozenset(
    {"api_key", "apikey", "access_token", "auth_token", "token", "password", "secret", "authorization"}
)
ENDINGS = ("_api_key", "_secret", "_password")


def is_secret(name: str) -> bool:
    """True for a field (its column's name, objects' keys joined by dots) whose value is masked when it
    is a text: its last segment is one of :data:`NAMES` or ends in one of :data:`ENDINGS`."""
    last = name.rsplit(".", 1)[-1].lower()
    return last in NAMES or last.endswith(ENDINGS)


def mask(name: str, value):
    """``value`` as the store keeps it under the field ``name``: :data:`MASK` for a secret's text."""
    return MASK if isinstance(value, str) and is_secret(name) else value


# A JSON member whose value is a string (perhaps cut short, as the start of a bad line kept to show it).
_MEMBER = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:\s*)"(?:[^"\\]|\\.)*(?:"|\\?$)')


def mask_text(raw: str) -> str:
    """The start of a raw line (kept to show why it could not be read) with the string value of every
    secret's member masked."""
    return _MEMBER.sub(lambda m: f'"{m[1]}"{m[2]}"{MASK}"' if is_secret(m[1]) else m[0], raw)
