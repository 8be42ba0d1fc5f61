"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from data.demo import write_demo_run


@pytest.fixture(scope="module")
def demo_run(request, tmp_path_factory) -> Path:
    """The demo generator's run (2 rank files, 12 steps of 32 responses), written locally under the name
    the test module calls ``RUN``."""
    return write_demo_run(tmp_path_factory.mktemp("local-root"), request.module.RUN, steps=12, per_step=32)
