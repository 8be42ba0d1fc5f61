"""The compare page's view state: ``/compare?run=A&run=B[&run=C…]`` and its options, as one frozen
dataclass decoded from and encoded to the URL (bad values fall back with a notice each)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from data.compare.curves import X_AXES
from data.compare.runs import MAX_RUNS
from data.compare.smoothing import MAX_WEIGHT
from data.curve_panels import BANDS, DEFAULT_BAND
from data.views import paths
from data.views.codec import encode, fmt_float, get_choice, get_float, key_notices
from data.views.paths import unknown_run_notice

# Keys that may be given more than once: the runs (in order) and the chosen step of each run.
MULTI = ("run", "at")
MATCH_RE = re.compile(r"[0-9a-f]{32}")


def values(query: Mapping, key: str) -> list[str]:
    """Every value of ``key`` in a parsed query or a ``layout(**query)`` mapping, in order."""
    v = query.get(key)
    if v is None:
        return []
    return [str(x) for x in v] if isinstance(v, list | tuple) else [str(v)]


@dataclass(frozen=True)
class CompareView:
    """What the URL says.

    ``runs``: the runs compared, in order (``run=`` repeated; each run keeps its colour by position);
    ``smooth``: the EMA weight in [0, 0.999] (0: raw); ``x``: ``step`` or ``samples`` (responses seen);
    ``band``: the spread band of the banded curves; ``at``: ``((run, step), …)``, the step whose reward
    distribution is shown for a run (``at=run:step``; default its last step); ``trainer``: the trainer key
    charted; ``a`` / ``b``: the two runs whose prompts are paired (default the first two); ``solved``: the
    threshold τ and ``gap`` the gap limit in steps (defaults: see :mod:`data.compare.prompts`); ``prompt``:
    the shared prompt opened (its match key).
    """

    runs: tuple[str, ...] = ()
    smooth: float = 0.0
    x: str = "step"
    band: str = DEFAULT_BAND
    at: tuple[tuple[str, int], ...] = ()
    trainer: str | None = None
    a: str | None = None
    b: str | None = None
    solved: float | None = None
    prompt: str | None = None
    gap: float | None = None

    @classmethod
    def from_query(
        cls, query: Mapping, runs: list[str], unreadable: Mapping[str, str] | None = None
    ) -> tuple[CompareView, list[str]]:
        """Decode a query; ``runs`` are the runs under the root (others are dropped with a notice, which
        names a folder in ``unreadable``, the folders the board may not read, as such)."""
        single = {k: v for k, v in query.items() if k not in MULTI}
        msgs = key_notices(single, [f.name for f in fields(cls) if f.name not in ("runs", "at")])
        chosen: list[str] = []
        for r in values(query, "run"):
            if r in (unreadable or {}):
                msgs.append(unknown_run_notice(paths.COMPARE, r, None, runs, unreadable))
            elif r not in runs:
                msgs.append(f"Unknown run {r!r}: it is not one of the runs under the rollout root.")
            elif r in chosen:
                msgs.append(f"Run {r!r} is given twice: compared once.")
            else:
                chosen.append(r)
        if len(chosen) > MAX_RUNS:
            msgs.append(f"At most {MAX_RUNS} runs are compared: {', '.join(chosen[MAX_RUNS:])} left out.")
            chosen = chosen[:MAX_RUNS]
        smooth = get_float(query, "smooth", msgs, 0.0)
        if not 0 <= smooth <= MAX_WEIGHT:
            msgs.append(f"Ignored smooth={smooth!r}: the smoothing weight is between 0 and {MAX_WEIGHT}.")
            smooth = 0.0
        x = get_choice(query, "x", X_AXES, msgs, "step")
        band = get_choice(query, "band", BANDS, msgs, DEFAULT_BAND)
        at: dict[str, int] = {}
        for raw in values(query, "at"):
            run, sep, step = raw.rpartition(":")
            if not sep or run not in chosen or not re.fullmatch(r"-?\d+", step):
                msgs.append(f"Ignored at={raw!r}: expected run:step for a run compared.")
                continue
            at[run] = int(step)
        trainer = single.get("trainer")
        trainer = (trainer[0] if isinstance(trainer, list | tuple) else trainer) or None
        # The pair: run A (default the first run) and run B (default the first other run).
        a = get_choice(query, "a", chosen, msgs, None) if chosen else None
        a = a or (chosen[0] if chosen else None)
        b = get_choice(query, "b", chosen, msgs, None) if chosen else None
        if b is not None and b == a:
            msgs.append("The two runs paired by prompt are the same run: the next one is taken.")
            b = None
        b = b or next((r for r in chosen if r != a), None)
        solved = get_float(query, "solved", msgs, None)
        gap = get_float(query, "gap", msgs, None)
        if gap is not None and not (math.isfinite(gap) and gap >= 0):
            msgs.append(f"Ignored gap={gap!r}: the gap limit is a number of steps, 0 or more.")
            gap = None
        prompt = single.get("prompt")
        prompt = prompt[0] if isinstance(prompt, list | tuple) else prompt
        if prompt is not None and not MATCH_RE.fullmatch(str(prompt)):
            msgs.append(f"Ignored prompt={prompt!r}: not a prompt's match key.")
            prompt = None
        view = cls(
            tuple(chosen), smooth, x, band, tuple(at.items()), trainer, a, b, solved, prompt or None, gap
        )
        return view, msgs

    def to_query(self) -> str:
        """``?run=A&run=B&smooth=0.6&x=samples&…`` without defaults ('' when nothing is set)."""
        a_default = self.runs[0] if self.runs else None
        b_default = next((r for r in self.runs if r != self.a), None) if len(self.runs) > 1 else None
        return encode(
            [
                *(("run", r) for r in self.runs),
                ("smooth", fmt_float(self.smooth) if self.smooth else None),
                ("x", None if self.x == "step" else self.x),
                ("band", None if self.band == DEFAULT_BAND else self.band),
                *(("at", f"{r}:{s}") for r, s in self.at),
                ("trainer", self.trainer),
                ("a", None if self.a == a_default else self.a),
                ("b", None if self.b == b_default else self.b),
                ("solved", self.solved),
                ("gap", self.gap),
                ("prompt", self.prompt),
            ]
        )

    def step_of(self, run: str) -> int | None:
        """The chosen step of ``run`` (None: its last step)."""
        return dict(self.at).get(run)

    def with_(self, **changes) -> CompareView:
        return replace(self, **changes)
