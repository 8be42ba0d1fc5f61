"""Access-log lines without the access token: ``?token=…`` (how a browser first presents it, see auth.py)
is written as ``token=[redacted]`` by gunicorn's access log (``logger_class`` in gunicorn.conf.py) and by the
development server's request log. Imports only the standard library and gunicorn: gunicorn's master
process imports it."""

from __future__ import annotations

import logging
import re

from gunicorn.glogging import Logger

TOKEN_PARAM = "token"
REDACTED = "[redacted]"
# The parameter's name as a client may spell it in a URL: each letter also percent-encoded (%74oken
# decodes to "token", which the server accepts), in a query string or a Referer's.
_NAME = "".join(f"(?:{c}|%{ord(c):02x})" for c in TOKEN_PARAM)
_PARAM = re.compile(rf"(?i)([?&;]{_NAME}=)[^&;#\s\"]*")


def redact(text: str) -> str:
    """``text`` (a request line, a URL, a query string) with the token parameter's value replaced."""
    if not isinstance(text, str):
        return text
    # A bare query string (gunicorn's %(q)s) starts with the parameter itself.
    return _PARAM.sub(rf"\1{REDACTED}", "&" + text)[1:] if text else text


class RedactingLogger(Logger):
    """gunicorn's logger, with the token redacted from every access-log field (request line, query string,
    Referer, any header or environ field a custom format might print)."""

    def atoms(self, resp, req, environ, request_time):
        return {k: redact(v) for k, v in super().atoms(resp, req, environ, request_time).items()}


class RedactingFilter(logging.Filter):
    """For the development server's request log (``werkzeug``): the token redacted from the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True
