"""Optional access control for a shared server with no proxy in front: HTTP basic auth or a shared token.

Off unless ``RLBOARD_BASIC_AUTH=user:password`` or ``RLBOARD_TOKEN=...`` is set (both may be; either then
lets a request in). A token is accepted as ``Authorization: Bearer <token>`` or as the ``rlboard_token``
cookie, which visiting any page with ``?token=<token>`` sets (the token is then dropped from the address).
``/healthz`` always stays open for probes. Secrets are compared in constant time.

``RLBOARD_READ_TOKEN`` lets pages in (as a bearer token or ``?token=``) but never writes: annotations, the
board's only write path, need the basic-auth user or ``RLBOARD_TOKEN`` whenever access control is on
(:func:`writer`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import urlencode

from flask import Flask, Response, redirect, request

from access_log import TOKEN_PARAM
from data import service

COOKIE = "rlboard_token"
REALM = "RL Logging Board"
COOKIE_MAX_AGE = 30 * 24 * 3600


def secret_equal(given: str | None, expected: str) -> bool:
    """Constant-time comparison of two secrets (hashed first, so their lengths leak nothing either)."""
    if given is None:
        return False
    a = hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest()
    b = hashlib.sha256(expected.encode("utf-8", "surrogatepass")).digest()
    return hmac.compare_digest(a, b)


def own_headers(settings) -> dict:
    """Request headers that pass this access control with ``settings``' own secrets (for the app's own
    requests, e.g. its warm-up at start-up); empty when access control is off."""
    if settings.token:
        return {"Authorization": f"Bearer {settings.token}"}
    if settings.basic_auth:
        return {"Authorization": "Basic " + base64.b64encode(settings.basic_auth.encode()).decode()}
    return {}


def _basic_ok(expected: str) -> bool:
    auth = request.authorization
    if auth is None or auth.type != "basic":
        return False
    user, _, password = expected.partition(":")
    # Both compared, always, so that a wrong user name takes as long as a wrong password.
    ok_user = secret_equal(auth.username or "", user)
    ok_password = secret_equal(auth.password or "", password)
    return ok_user and ok_password


def _token_ok(expected: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and secret_equal(value.strip(), expected):
        return True
    return secret_equal(request.cookies.get(COOKIE), expected)


def _denied(basic: bool, prefix: str) -> Response:
    if basic:
        resp = Response("Authentication required.\n", status=401, mimetype="text/plain")
        resp.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
    else:
        resp = Response(
            f"This board needs an access token: open {prefix}?token=<token> once, or send the header "
            "'Authorization: Bearer <token>'.\n",
            status=401,
            mimetype="text/plain",
        )
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _token_in_url(expected: str, prefix: str) -> Response | None:
    """``?token=...``: a right token sets the cookie and redirects to the same URL without it."""
    given = request.args.get(TOKEN_PARAM)
    if given is None:
        return None
    if not secret_equal(given, expected):
        return None
    rest = [(k, v) for k, v in request.args.items(multi=True) if k != TOKEN_PARAM]
    target = request.path + ("?" + urlencode(rest) if rest else "")
    resp = redirect(target, code=303)
    resp.set_cookie(
        COOKIE,
        expected,
        max_age=COOKIE_MAX_AGE,
        path=prefix,
        httponly=True,
        samesite="Lax",
        secure=request.is_secure,
    )
    resp.headers["Cache-Control"] = "no-store"
    return resp


def install(server: Flask, prefix: str) -> None:
    """Register the check on every request of ``server`` (settings are read per request, so that the
    board's settings decide: tests re-configure it)."""
    base = prefix.rstrip("/")
    cookie_path = base + "/"
    open_paths = {base + "/healthz"}

    @server.before_request
    def _require_auth():
        settings = service.board().settings
        basic, token, read = settings.basic_auth, settings.token, settings.read_token
        if not basic and not token and not read:
            return None
        if request.path in open_paths:
            return None
        for secret in (token, read):
            if not secret:
                continue
            if request.method == "GET" and (resp := _token_in_url(secret, cookie_path)) is not None:
                return resp
            if _token_ok(secret):
                return None
        if basic and _basic_ok(basic):
            return None
        return _denied(bool(basic), cookie_path)


def writer(settings) -> tuple[str | None, str | None]:
    """``(who, None)`` when the request may write (the basic-auth user's name, else "anonymous"), or
    ``(None, why not)``: with access control on, only the basic-auth user or ``RLBOARD_TOKEN`` writes; a
    read-only token (``RLBOARD_READ_TOKEN``) never does. Call it inside a request."""
    basic, token, read = settings.basic_auth, settings.token, settings.read_token
    if basic and _basic_ok(basic):
        return (request.authorization.username or "anonymous"), None
    if token and _token_ok(token):
        return "anonymous", None
    if not basic and not token and not read:
        return "anonymous", None
    if read and _token_ok(read):
        return None, "Not saved: this board was opened with a read-only token (RLBOARD_READ_TOKEN)."
    if not basic and not token:
        return None, "Not saved: this board is read-only (only RLBOARD_READ_TOKEN is set)."
    return None, "Not saved: writing needs the board's user name and password or its token."
