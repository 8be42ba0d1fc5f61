"""The demo runs written into an empty default rollout root, so the board shows what it can do on first
launch: ``demo-ppo`` (a PPO run: critic values, per-token rewards, a reference, reward hacking late on) and
``demo-grpo`` (a GRPO run: groups of responses per prompt, two reward functions, the trainer's own log).

Deterministic, and only the standard library, numpy and orjson (no Dash): text.py (tokens, prompts,
response texts), numbers.py (log-probs, rounding), ppo.py and grpo.py (one run each).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from data.demo.grpo import write_grpo_run
from data.demo.numbers import round_sig
from data.demo.ppo import KL_COEF, RESPONSE_LIMIT, write_demo_run
from data.demo.text import EOS, PAD, detokenize, prompt_pool, token_vocabulary, tokenize

__all__ = [
    "DEMO_RUNS",
    "EOS",
    "KL_COEF",
    "PAD",
    "RESPONSE_LIMIT",
    "detokenize",
    "ensure_demo",
    "prompt_pool",
    "round_sig",
    "token_vocabulary",
    "tokenize",
    "write_demo_run",
    "write_grpo_run",
]

# The runs ensure_demo writes, by name: each a function of (root, run name) that writes it there.
DEMO_RUNS = {"demo-ppo": write_demo_run, "demo-grpo": write_grpo_run}


def _has_run(root: Path) -> bool:
    if not root.is_dir():
        return False
    for child in root.iterdir():
        if child.name.startswith("."):
            continue
        if child.is_dir() and any(p.is_file() for p in child.glob("*.jsonl")):
            return True
    return False


def ensure_demo(root: Path) -> list[Path]:
    """Write the demo runs (:data:`DEMO_RUNS`) into ``root`` only if ``root`` holds no run (a sub-folder with
    ``*.jsonl`` files); return the run folders written (none when ``root`` held a run).

    The runs are built in a hidden temporary folder and renamed into place, so a concurrent reader never
    sees a half-written run, and of two processes racing here only one writes them.
    """
    root = Path(root)
    if _has_run(root):
        return []
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-tmp-", dir=root))
    written: list[Path] = []
    try:
        for name, write in DEMO_RUNS.items():
            built, target = write(tmp, name), root / name
            try:
                os.rename(built, target)  # fails if another process already put a non-empty run there
            except OSError:
                if written or _has_run(root) or not target.is_dir():
                    return written
                for f in sorted(built.iterdir()):  # an existing folder without *.jsonl: fill it
                    os.replace(f, target / f.name)
            written.append(target)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
