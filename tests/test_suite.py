"""Rules of the test suite itself, checked on its source (no browser, no server)."""

import ast
import re
from pathlib import Path

import pytest

from tests.waiting import wait_until

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


def test_suite003_every_fixed_sleep_says_why():
    """A test waits for something on its condition (:func:`tests.waiting.wait_until`, dash_duo's
    ``wait_for_*``); a fixed sleep is left only where it is the thing under test (files kept still, a slow
    stand-in, a trainer's pace), with a comment on its line saying so."""
    bare = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("waiting.py", "test_suite.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\bsleep\(", line) and "#" not in line.split("sleep(", 1)[1]:
                bare.append(f"{path.relative_to(TESTS)}:{n}: {line.strip()}")
    assert bare == [], (
        "wait on a condition (tests/waiting.py), or say why the sleep is the test:\n" + "\n".join(bare)
    )


def test_suite004_wait_until_returns_the_value_or_says_what_it_waited_for():
    """:func:`wait_until` returns the first truthy value; past its deadline it raises, naming what it
    waited for and the last value it saw."""
    seen = iter([0, None, "", "ready"])
    assert wait_until(lambda: next(seen), 5, "a value", interval=0) == "ready"
    with pytest.raises(TimeoutError, match=r"waited 0\.05 s for the moon; last seen: \[\]"):
        wait_until(list, 0.05, lambda: "the moon", interval=0.01)
