"""Every page reads a repeated or malformed query key the same way: the first value of a repeated key is
used and the others are named in a notice; an unknown or malformed key is ignored with a notice; never a
500. /export, strict, refuses both."""

from __future__ import annotations

import re

import pytest

from data.views.codec import MAX_KEY_NOTICES
from tests.integration.test_security import _page_text

PAGES = ("/reward", "/scatter", "/responses", "/tokens", "/prompts")
A, B = "trl-ppo-small", "trl-grpo-small"


def _notices(text: str) -> list[str]:
    return re.findall(r"Ignored [^\"]*", text)


@pytest.mark.parametrize("path", PAGES)
def test_keys001_repeated_run_takes_the_first_with_a_notice(path, dash_app, client, fixtures_dir):
    """?run=A&run=B opens A on every page, with the same notice naming B (was a 500 and a blank page on
    the responses page)."""
    text = _page_text(dash_app, client, path, f"?run={A}&run={B}")
    want = f"Ignored run='{B}': run is given more than once; the first, run='{A}', is used."
    assert want in text, (path, _notices(text))
    assert "Unknown run" not in text and "Traceback" not in text
    assert A in text


@pytest.mark.parametrize("path", PAGES)
def test_keys002_repeated_first_value_blank(path, dash_app, client, fixtures_dir):
    """?run=&run=A: the first (blank) value is used, as every helper reads it, and the other is named."""
    text = _page_text(dash_app, client, path, f"?run=&run={A}")
    assert f"Ignored run='{A}': run is given more than once; the first, run='', is used." in text, path


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize(
    "raw, key", [("%zz=1", "%zz"), ("=x", ""), ("run%5B%5D=x", "run[]"), ("nope", "nope")]
)
def test_keys003_malformed_or_unknown_key_is_noticed(path, raw, key, dash_app, client, fixtures_dir):
    """A malformed or unknown key is ignored with the same notice on every page."""
    text = _page_text(dash_app, client, path, f"?run={A}&{raw}")
    assert f"Ignored unknown parameter {key!r}." in text, (path, _notices(text))
    assert "Unknown run" not in text


@pytest.mark.parametrize("path", PAGES)
def test_keys004_thousands_of_bad_keys_give_a_few_notices(path, dash_app, client, fixtures_dir):
    """A URL of 2,000 junk keys gives at most MAX_KEY_NOTICES notices, the last one counting the rest."""
    junk = "&".join(f"k{i}=1" for i in range(2000))
    text = _page_text(dash_app, client, path, f"?run={A}&{junk}")
    for answer in text.split("\n"):  # the layout, then each URL callback: each shows its notices
        assert answer.count("Ignored unknown parameter") <= MAX_KEY_NOTICES - 1
    assert f"… and {2000 - MAX_KEY_NOTICES + 1} more ignored parameters." in text


def test_keys005_export_refuses_repeated_keys(client, fixtures_dir):
    """/export checks strictly: a repeated key is a 400 with the reason, not the first value silently."""
    r = client.get(f"/export?run={A}&run={B}&format=csv")
    assert r.status_code == 400
    assert f"run='{B}': run is given more than once" in r.get_data(as_text=True)
