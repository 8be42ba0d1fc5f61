"""Settings: the allocator setting that importing ``data`` makes for Polars."""

from __future__ import annotations

import subprocess
import sys

from data.config import POLARS_ALLOCATOR, REPO_ROOT, configure_allocator


def test_config001_allocator_setting_leaves_a_user_value_alone():
    """The setting goes in when the variable is unset, and a value the user set is kept as it is."""
    name, value = POLARS_ALLOCATOR
    env: dict[str, str] = {}
    configure_allocator(env)
    assert env == {name: value}
    env = {name: "dirty_decay_ms:0"}
    configure_allocator(env)
    assert env == {name: "dirty_decay_ms:0"}


def test_config002_importing_data_configures_polars_before_it_loads():
    """In a fresh interpreter, ``import data`` comes before Polars' own import (as in app.py), so Polars
    hands our decay times to its allocator: they follow its defaults and override them."""
    name, value = POLARS_ALLOCATOR
    code = (
        "import os, sys; import data; assert 'polars' not in sys.modules; "
        "import polars; print(os.environ[%r])" % name
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().endswith("," + value)


def test_config003_end_tokens_from_the_environment_and_flags():
    """RLBOARD_END_TOKENS sets the tokens that end a response (comma-separated, blanks dropped); a flag
    wins; by default GPT-2's, Llama's, ChatML's, Gemma's and others' end tokens."""
    from data.config import DEFAULT_END_TOKENS, load_settings

    assert load_settings({}).end_tokens == DEFAULT_END_TOKENS
    assert {"<|endoftext|>", "</s>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>"} <= set(DEFAULT_END_TOKENS)
    assert load_settings({"RLBOARD_END_TOKENS": "<eos>, ,[END]"}).end_tokens == ("<eos>", "[END]")
    assert load_settings({"RLBOARD_END_TOKENS": "<eos>"}, end_tokens="</s>").end_tokens == ("</s>",)


def test_config004_a_bad_read_limit_stops_the_start():
    """A read limit that is not a positive number is refused when the settings are loaded (the server does
    not start), naming the setting (before: refused only when a file was first read, by then serving)."""
    import pytest

    from data.config import SettingsError, load_settings

    assert load_settings({"RLBOARD_MAX_LINE_BYTES": "2048"}).port  # a good one loads
    with pytest.raises(SettingsError, match="RLBOARD_MAX_LINE_BYTES='lots' must be a positive number"):
        load_settings({"RLBOARD_MAX_LINE_BYTES": "lots"})
    # And the server itself: `app.py serve` exits with the message, not a traceback.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "RLBOARD_MAX_INFLATE_RATIO": "-3"}
    out = subprocess.run(
        [sys.executable, "app.py", "serve", "--port", str(port), "--host", "127.0.0.1"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "RLBOARD_MAX_INFLATE_RATIO='-3' must be a positive number" in out.stderr
    assert "Traceback" not in out.stderr
