"""The layers of pyproject.toml's import-linter contracts hold (a wrong import fails the test run)."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_imports001_contracts_kept():
    """``lint-imports`` keeps every contract: pages above components and data, which never import each
    other; data never imports Dash; no cycles among data's modules and packages."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is a dev dependency: uv sync installs it"
    run = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
