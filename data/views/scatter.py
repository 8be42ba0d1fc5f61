"""The scatter page's view state (``/scatter?run=R&step=40-60&x=kl_sum&y=reward&kl_sum_min=2&kl_sum_max=9&
reward_min=1.5&reward_max=3``): which steps, which two columns, and the box brushed on them as the two
columns' range filters (the responses page's keys, so that the box opens exactly its responses there)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from data.metrics import label
from data.scatter import AXES, DEFAULT_X, DEFAULT_Y, Box, Steps, range_key
from data.views.codec import encode, first, get_bool, get_float, key_notices
from data.views.responses import ResponsesView

ALL_STEPS = "all"
_SPAN = re.compile(r"(-?\d+)\s*-\s*(-?\d+)")
_ONE = re.compile(r"-?\d+")


@dataclass(frozen=True)
class ScatterView:
    """What the URL says: the run; one ``step`` (None: the run's last), or a ``span`` of steps (first,
    last), or ``every`` step; the columns drawn on ``x`` and ``y`` (two of :data:`data.scatter.AXES`); the
    ``box`` brushed (``x_min <= x < x_max`` and ``y_min <= y < y_max``, or None); a log scale on x
    (``xlog=1``), on y (``ylog=1``)."""

    run: str | None = None
    step: int | None = None
    span: tuple[int, int] | None = None
    every: bool = False
    x: str = DEFAULT_X
    y: str = DEFAULT_Y
    box: Box | None = None
    xlog: bool = False
    ylog: bool = False

    @property
    def logs(self) -> tuple[bool, bool]:
        return self.xlog, self.ylog

    @classmethod
    def from_query(cls, query: Mapping, ctx) -> tuple[ScatterView, list[str]]:
        """Decode a query (parsed or ``layout(**query)``); bad values fall back with a notice each. ``ctx``:
        the run's :class:`data.run_context.RunContext` (a step the run lacks is resolved by its rule)."""
        box_keys = [f"{range_key(c)}_{e}" for c in AXES for e in ("min", "max")]
        msgs = key_notices(query, ("run", "step", "x", "y", "xlog", "ylog", *box_keys))
        msgs += ctx.notices
        step, span, every = _steps(first(query, "step"), ctx, msgs)
        x = _axis(query, "x", DEFAULT_X, msgs)
        y = _axis(query, "y", DEFAULT_Y, msgs)
        if x == y:
            other = DEFAULT_Y if x != DEFAULT_Y else DEFAULT_X
            msgs.append(f"Ignored y={y!r}: the same column as x; showing {label(other)}.")
            y = other
        box = _box(query, x, y, box_keys, msgs)
        logs = get_bool(query, "xlog", msgs), get_bool(query, "ylog", msgs)
        return cls(ctx.run, step, span, every, x, y, box, *logs), msgs

    def to_query(self) -> str:
        """``?run=R&step=S&x=…&y=…`` and the box's four bounds, defaults left out."""
        step = ALL_STEPS if self.every else ("{}-{}".format(*self.span) if self.span else self.step)
        pairs = [
            ("run", self.run),
            ("step", step),
            ("x", None if self.x == DEFAULT_X else self.x),
            ("y", None if self.y == DEFAULT_Y else self.y),
            ("xlog", True if self.xlog else None),
            ("ylog", True if self.ylog else None),
        ]
        if self.box is not None:
            kx, ky = range_key(self.x), range_key(self.y)
            b = self.box
            pairs += [
                (f"{kx}_min", b.x_min),
                (f"{kx}_max", b.x_max),
                (f"{ky}_min", b.y_min),
                (f"{ky}_max", b.y_max),
            ]
        return encode(pairs)

    def steps(self, run_steps: list[int]) -> Steps:
        """The steps drawn: the URL's step (else the run's last), its range, or every step shown."""
        if self.every:
            return Steps()
        if self.span is not None:
            return Steps(*self.span)
        step = self.step if self.step is not None else (run_steps[-1] if run_steps else None)
        return Steps(step, step) if step is not None else Steps(0, -1)  # no step: nothing

    def steps_text(self, run_steps: list[int]) -> str:
        """The step box's text: ``51``, ``40-60`` or ``all``."""
        if self.every:
            return ALL_STEPS
        if self.span is not None:
            return "{}-{}".format(*self.span)
        s = self.steps(run_steps).single
        return "" if s is None else str(s)

    def with_steps(self, text: str | None, ctx) -> tuple[ScatterView, list[str]]:
        """This view at the steps typed (``51``, ``40-60``, ``all``; empty: the run's last step), with the
        notice of a text that is none of these; a new selection of steps drops the box."""
        msgs: list[str] = []
        step, span, every = _steps((text or "").strip() or None, ctx, msgs)
        if msgs:
            return self, msgs
        new = replace(self, step=step, span=span, every=every)
        return (new if new == self else replace(new, box=None)), []


def _steps(raw: str | None, ctx, msgs: list[str]) -> tuple[int | None, tuple[int, int] | None, bool]:
    """``step=`` as ``(step, span, every)``: a number (resolved by the run's step rule), ``first-last`` or
    ``all``; None (the run's last step) when absent or unreadable, with a notice for the latter."""
    if not raw:
        return None, None, False
    if raw.lower() == ALL_STEPS:
        return None, None, True
    if _ONE.fullmatch(raw):
        step, more = ctx.step(int(raw)) if ctx.run is not None else (int(raw), [])
        msgs += more
        return step, None, False
    m = _SPAN.fullmatch(raw)
    if m and int(m.group(1)) <= int(m.group(2)):
        return None, (int(m.group(1)), int(m.group(2))), False
    msgs.append(f"Ignored step={raw!r}: a step (51), a range of steps (40-60) or 'all'.")
    return None, None, False


def _axis(query: Mapping, key: str, default: str, msgs: list[str]) -> str:
    raw = first(query, key)
    if not raw:
        return default
    if raw in AXES:
        return raw
    msgs.append(f"Ignored {key}={raw!r}: expected one of {', '.join(AXES)}.")
    return default


def _box(query: Mapping, x: str, y: str, box_keys: list[str], msgs: list[str]) -> Box | None:
    """The box of the x and y columns' four bounds, None when absent; a partial or empty box, or bounds of
    a column not drawn, are ignored with a notice."""
    kx, ky = range_key(x), range_key(y)
    mine = [f"{kx}_min", f"{kx}_max", f"{ky}_min", f"{ky}_max"]
    for k in box_keys:
        if k not in mine and first(query, k) is not None:
            msgs.append(f"Ignored {k}: a box has bounds on the two columns drawn only ({kx}, {ky}).")
    bounds = [get_float(query, k, msgs) for k in mine]
    if all(b is None for b in bounds):
        return None
    x0, x1, y0, y1 = bounds
    if any(b is None for b in bounds) or x0 >= x1 or y0 >= y1:
        msgs.append(f"Ignored the box: it needs {', '.join(mine)}, each minimum below its maximum.")
        return None
    return Box(x0, x1, y0, y1)


def box_responses(view: ScatterView, run_steps: list[int]) -> ResponsesView | None:
    """The responses view of the box brushed on ``view`` (None without one): the box as the two columns'
    range filters, at the view's step, or over every step, limited to a range of steps by the step's range
    filter (``step_min = first``, ``step_max = last + 1``: ranges are half-open)."""
    if view.box is None:
        return None
    b, kx, ky = view.box, range_key(view.x), range_key(view.y)
    ranges = {f"{kx}_min": b.x_min, f"{kx}_max": b.x_max, f"{ky}_min": b.y_min, f"{ky}_max": b.y_max}
    steps = view.steps(run_steps)
    if steps.single is not None:
        return ResponsesView(run=view.run, step=steps.single, **ranges)
    if steps.first is not None:
        ranges |= {"step_min": steps.first, "step_max": steps.last + 1}
    return ResponsesView(run=view.run, step=ALL_STEPS, **ranges)
