"""The gap page's view state (``/gap?run=R&step=S&band=p25-p75&rule=mis&c=2``): the inference–trainer gap's
curves and what a correction (``rule`` at threshold ``c``, see data.infer_gap.RULES) would do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from data.curve_panels import BANDS
from data.infer_gap import DEFAULT_C, DEFAULT_RULE, RULES, check_c
from data.views.codec import encode, fmt_float, get_choice, get_float, get_int, key_notices

DEFAULT_BAND = "p25-p75"


def correction(query: Mapping, msgs: list[str]) -> tuple[str, float]:
    """``rule`` and ``c`` of a query (the gap and token pages'), each bad one back to its default with a
    notice."""
    rule = get_choice(query, "rule", RULES, msgs, DEFAULT_RULE)
    c = get_float(query, "c", msgs, DEFAULT_C)
    if (why := check_c(c)) is not None:
        msgs.append(f"Ignored c={c!r}: {why}.")
        c = DEFAULT_C
    return rule, c


def correction_query(rule: str, c: float) -> list[tuple[str, object]]:
    """The ``rule`` / ``c`` pairs of a URL, defaults left out."""
    return [("rule", None if rule == DEFAULT_RULE else rule), ("c", None if c == DEFAULT_C else fmt_float(c))]


@dataclass(frozen=True)
class GapView:
    """What the URL says: run, selected step (None = the run's last step), the band of the per-response
    curves, and the correction previewed."""

    run: str | None = None
    step: int | None = None
    band: str = DEFAULT_BAND
    rule: str = DEFAULT_RULE
    c: float = DEFAULT_C

    @classmethod
    def from_query(cls, query: Mapping, ctx) -> tuple[GapView, list[str]]:
        """Decode a query; bad values fall back with a notice each; a step the run lacks by the run's rule."""
        msgs = key_notices(query, (f.name for f in fields(cls)))
        msgs += ctx.notices
        step = get_int(query, "step", msgs)
        if step is not None and ctx.run is not None:
            step, more = ctx.step(step)
            msgs += more
        band = get_choice(query, "band", BANDS, msgs, DEFAULT_BAND)
        rule, c = correction(query, msgs)
        return cls(ctx.run, step, band, rule, c), msgs

    def to_query(self) -> str:
        """``?run=R&step=S&band=B&rule=R&c=C`` without defaults."""
        band = None if self.band == DEFAULT_BAND else self.band
        return encode(
            [("run", self.run), ("step", self.step), ("band", band), *correction_query(self.rule, self.c)]
        )

    def shown_step(self, steps: list[int]) -> int | None:
        """The step the page shows: the URL's, else the run's last one (None without steps)."""
        return self.step if self.step is not None else (steps[-1] if steps else None)

    def with_(self, **changes) -> GapView:
        return replace(self, **changes)
