"""Optional access control (auth.py): off by default, HTTP basic auth, shared token (header, ?token= cookie)."""

from __future__ import annotations

import base64

import pytest

from auth import COOKIE, secret_equal
from tests.conftest import router_body

ROUTER = router_body("/")


def _basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def fresh_client(dash_app):
    """A test client with its own cookie jar."""
    return dash_app.server.test_client()


def test_auth001_off_by_default(client, fixtures_dir):
    """Without RLBOARD_BASIC_AUTH / RLBOARD_TOKEN every page and callback answers without credentials."""
    assert client.get("/").status_code == 200
    assert client.get("/reward?run=trl-ppo-small").status_code == 200
    assert client.post("/_dash-update-component", json=ROUTER).status_code == 200


def test_auth002_basic_auth(fresh_client, board_root, fixtures_dir):
    """Basic auth: pages, assets and callbacks need the right user and password; /healthz stays open."""
    board_root(fixtures_dir, basic_auth="alice:pa:ss")
    c = fresh_client
    r = c.get("/reward")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Basic ")
    assert c.get("/reward", headers=_basic("alice", "wrong")).status_code == 401
    assert c.get("/reward", headers=_basic("bob", "pa:ss")).status_code == 401
    assert c.get("/reward", headers=_basic("alice", "pa:ss")).status_code == 200
    assert c.get("/_dash-layout").status_code == 401
    assert c.get("/_dash-layout", headers=_basic("alice", "pa:ss")).status_code == 200
    assert c.post("/_dash-update-component", json=ROUTER).status_code == 401
    assert c.post("/_dash-update-component", json=ROUTER, headers=_basic("alice", "pa:ss")).status_code == 200
    health = c.get("/healthz")
    assert health.status_code == 200 and health.get_json()["status"] == "ok"


def test_auth003_bearer_token(fresh_client, board_root, fixtures_dir):
    """A shared token: accepted as 'Authorization: Bearer', refused when wrong or missing."""
    board_root(fixtures_dir, token="t0ken-42")
    c = fresh_client
    r = c.get("/")
    assert r.status_code == 401
    assert "token" in r.get_data(as_text=True)
    assert c.get("/", headers={"Authorization": "Bearer t0ken-43"}).status_code == 401
    assert c.get("/", headers={"Authorization": "Bearer t0ken-42"}).status_code == 200
    assert c.get("/", headers={"Authorization": "Basic dDBrZW4tNDI="}).status_code == 401
    assert c.get("/healthz").status_code == 200


def test_auth004_token_in_url_sets_cookie(fresh_client, board_root, fixtures_dir):
    """Visiting ?token=... sets an HttpOnly cookie and redirects to the same URL without the token."""
    board_root(fixtures_dir, token="t0ken-42")
    c = fresh_client
    assert c.get("/reward?run=trl-ppo-small&token=nope").status_code == 401
    r = c.get("/reward?run=trl-ppo-small&token=t0ken-42")
    assert r.status_code == 303
    assert r.headers["Location"].endswith("/reward?run=trl-ppo-small")
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert c.get("/reward?run=trl-ppo-small").status_code == 200
    assert c.post("/_dash-update-component", json=ROUTER).status_code == 200
    c.delete_cookie(COOKIE)
    assert c.get("/reward?run=trl-ppo-small").status_code == 401


def test_auth005_basic_or_token(fresh_client, board_root, fixtures_dir):
    """With both switched on, either credential lets a request in."""
    board_root(fixtures_dir, basic_auth="alice:secret", token="t0ken-42")
    c = fresh_client
    assert c.get("/").status_code == 401
    assert c.get("/", headers=_basic("alice", "secret")).status_code == 200
    assert c.get("/", headers={"Authorization": "Bearer t0ken-42"}).status_code == 200


def test_auth006_secret_equal():
    """The constant-time comparison: equal strings only; None, other lengths and prefixes are refused."""
    assert secret_equal("abc", "abc")
    assert secret_equal("ünï", "ünï")
    assert not secret_equal("abc", "abcd")
    assert not secret_equal("", "abc")
    assert not secret_equal(None, "abc")
