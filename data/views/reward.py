"""The reward page's view state (``/reward?run=R&step=S&band=p25-p75&zero=1&trainer=loss&heatmap=101-600``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from data.curve_panels import BANDS, DEFAULT_BAND
from data.views.codec import encode, first, get_bool, get_choice, get_int, key_notices


@dataclass(frozen=True)
class RewardView:
    """What the URL says: run, selected step (None = the run's last step), spread band, zero shift, the
    trainer's scalar charted and the text search ``q`` whose matches are charted."""

    run: str | None = None
    step: int | None = None
    band: str = DEFAULT_BAND
    zero: bool = False
    trainer: str | None = None  # the trainer's own scalar charted (None: data.compare.trainer.default_key)
    q: str | None = None  # the text search whose share of matches is charted per step
    # The steps the heatmap draws, first and last (None: the whole run; see data.heatmaps.heatmap_columns).
    heatmap: tuple[int, int] | None = None

    @classmethod
    def from_query(cls, query: Mapping, ctx) -> tuple[RewardView, list[str]]:
        """Decode a query (parsed or ``layout(**query)``); bad values fall back with a notice each.

        ``ctx``: the :class:`data.run_context.RunContext` of the run shown (``data.service.open_run`` of the
        query's run on this page); its notices come first, and a step the run lacks is resolved by its rule.
        """
        msgs = key_notices(query, (f.name for f in fields(cls)))
        msgs += ctx.notices
        run = ctx.run
        step = get_int(query, "step", msgs)
        if step is not None and run is not None:
            step, more = ctx.step(step)
            msgs += more
        band = get_choice(query, "band", BANDS, msgs, DEFAULT_BAND)
        zero = get_bool(query, "zero", msgs, False)
        heatmap = _window(first(query, "heatmap"), msgs)
        trainer, q = first(query, "trainer") or None, first(query, "q") or None
        return cls(run, step, band, zero, trainer, q, heatmap), msgs

    def to_query(self) -> str:
        """``?run=R&step=S&band=B&zero=1`` without defaults ('' when all are defaults)."""
        return encode(
            [
                ("run", self.run),
                ("step", self.step),
                ("band", None if self.band == DEFAULT_BAND else self.band),
                ("zero", True if self.zero else None),
                ("trainer", self.trainer),
                ("q", self.q),
                ("heatmap", None if self.heatmap is None else "{}-{}".format(*self.heatmap)),
            ]
        )

    def shown_step(self, steps: list[int]) -> int | None:
        """The step the page shows: the URL's, else the run's last one (None without steps)."""
        return self.step if self.step is not None else (steps[-1] if steps else None)

    def moved(self, steps: list[int], by: int) -> int | None:
        """The step ``by`` steps of the run away from the one shown (previous / next), kept within the run."""
        current = self.shown_step(steps)
        if current not in steps:
            return current
        return steps[min(max(steps.index(current) + by, 0), len(steps) - 1)]

    def at(self, steps: list[int], index) -> int | None:
        """The step at a slider position (the step shown for a position the run does not have)."""
        return steps[index] if isinstance(index, int) and 0 <= index < len(steps) else self.shown_step(steps)

    def picked(self, steps: list[int], step) -> int | None:
        """A step picked on a chart (the step shown for one the run does not have)."""
        return step if step in steps else self.shown_step(steps)

    def after(
        self, steps: list[int], move: str, *, index=None, picked=None, band: str | None = None, zero=False
    ) -> RewardView:
        """This view after a control moved (``move``): ``prev`` / ``next`` step, the slider to ``index``,
        a ``pick`` of step ``picked`` on a chart, or anything else (the band and zero-shift switch, which
        are always taken: ``band`` None keeps the view's)."""
        step = self.shown_step(steps)
        if move in ("prev", "next"):
            step = self.moved(steps, 1 if move == "next" else -1)
        elif move == "slider":
            step = self.at(steps, index)
        elif move == "pick":
            step = self.picked(steps, picked)
        return self.with_step(steps, step, band=band or self.band, zero=bool(zero))

    def with_step(self, steps: list[int], step: int | None, **changes) -> RewardView:
        """This view at ``step`` (and ``changes``); a view that follows the run's last step (no step in its
        URL) keeps following it when ``step`` is that last step, so its URL stays with a growing run."""
        if step == self.shown_step(steps) and self.step is None:
            step = None
        return replace(self, step=step, **changes)


_WINDOW = re.compile(r"(\d+)-(\d+)")


def _window(raw: str | None, msgs: list[str]) -> tuple[int, int] | None:
    """``heatmap=FIRST-LAST`` (steps, FIRST <= LAST); None, with a notice when it is not that."""
    if not raw:
        return None
    m = _WINDOW.fullmatch(raw)
    if m is None or int(m.group(1)) > int(m.group(2)):
        msgs.append(f"Ignored heatmap={raw!r}: a range of steps, first-last (e.g. heatmap=101-600).")
        return None
    return int(m.group(1)), int(m.group(2))


def heatmap_note(cols, step: int | None) -> str:
    """The heatmap's note (``cols``: ``data.curves.heatmap_columns``), saying when the selected ``step`` is
    not among the steps of its window."""
    if cols.window is not None and step is not None and not cols.first[0] <= step <= cols.last[-1]:
        return cols.note + f" The selected step, {step:,}, is not among them."
    return cols.note


def heatmap_window(query: Mapping) -> tuple[int, int] | None:
    """The query's ``heatmap=`` window alone (None when absent or not a range of steps), read without
    the rest of the view (which lists the runs under the root)."""
    return _window(first(query, "heatmap"), [])
