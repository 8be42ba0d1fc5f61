"""Rules of the test suite itself, checked on its source (no browser, no server)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_suite001_every_browser_test_ends_with_the_console_check():
    """Each browser test's last statement asserts that the browser logged nothing (``get_logs() == []``):
    an error in the console is a failure even where the page looked right."""
    missing = []
    for path in sorted((TESTS / "browser").glob("test_*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
                last = fn.body[-1]
                text = ast.unparse(last)
                if not (isinstance(last, ast.Assert) and ".get_logs() == []" in text):
                    missing.append(f"{path.name}::{fn.name} ends with {text[:60]!r}")
    assert missing == []
