"""The README and docs/: the README's test command is the one CI runs, the README stays short, and every
link between the documents points at a file that exists (no browser, no server)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_docs001_readme_test_command_is_the_one_ci_runs():
    """``.ci/run``'s ``TEST_COMMAND`` appears, as is, in the README's Quickstart."""
    ci = (REPO / ".ci" / "run").read_text()
    command = re.search(r'^TEST_COMMAND="([^"]+)"', ci, re.MULTILINE).group(1)
    readme = (REPO / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert re.search(rf"^{re.escape(command)}(\s|$)", quickstart, re.MULTILINE), command


def test_docs002_readme_fits_two_screens():
    """The README is at most 200 lines: the rest lives in docs/."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_docs003_relative_links_point_at_files():
    """Every relative link of the README, docs/ and benchmarks/ documents names a file of the repository."""
    documents = [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "benchmarks").glob("*.md")),
    ]
    broken = []
    for doc in documents:
        for target in LINK.findall(doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(REPO)} -> {target}")
    assert broken == []
