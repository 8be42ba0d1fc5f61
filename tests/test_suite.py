"""Rules of the test suite itself, checked on its source (no browser, no server)."""

import ast
import re
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


def _test_functions():
    """(file, name) of every test function under tests/, at any depth (module level or in a class)."""
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                yield path.relative_to(TESTS).as_posix(), node.name


def test_suite002_one_id_per_test():
    """Each test's id (``test_<area><nnn>``, or its whole name where it has no number) names that test
    alone, so ``-k <id>`` picks exactly one: no two tests share an id, and no id is part of another test's
    name (``test_x005`` and ``test_x005b`` clash)."""
    tests = list(_test_functions())
    clashes = {}
    for _, name in tests:
        number = re.match(r"test_[a-z_]+?\d{3}", name)
        key = (number.group(0) if number else name).lower()
        picked = [f"{p}::{n}" for p, n in tests if key in n.lower()]
        if len(picked) > 1:
            clashes[key] = picked
    listing = "\n".join(f"-k {key} picks {', '.join(picked)}" for key, picked in sorted(clashes.items()))
    assert not clashes, f"{len(clashes)} test ids pick more than one test:\n{listing}"
