"""The prompts page's view state (``/prompts?run=R&view=never&trend=..&q=..&sort=..&order=..&page=2``, and
``&prompt=KEY`` for one prompt, ``&prompt=KEY&step=S[&group=G]`` for its group(s) at step S side by side)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from data.metrics.group import TRENDS
from data.views import paths
from data.views.codec import encode, first, get_choice, get_int, get_regex, key_notices
from data.views.paths import shown_run, unknown_run_notice

PROMPT_KEY_RE = re.compile(r"[0-9a-f]{16}")
VIEWS = ("all", "never")
# The list's choices as the page names them.
VIEW_OPTIONS = {"all": "All prompts", "never": "Never beat the reference"}
# Sortable list columns and the order a first click on their header gives.
SORT_COLUMNS = {
    "prompt_preview": "asc",
    "first_step": "asc",
    "n_steps": "desc",
    "n_responses": "desc",
    "reward_early": "desc",
    "reward_late": "desc",
    "reward_delta": "desc",
    "gain_mean": "desc",
    "win_rate": "desc",
    "trend": "asc",
    "repetition_mean": "desc",
    "length_ratio_mean": "desc",
    "zero_spread_groups": "desc",
}
SORT_ALIASES = {"delta": "reward_delta", "gain": "gain_mean", "win": "win_rate", "steps": "n_steps"}
DEFAULT_SORT = "first_step"
ORDERS = ("asc", "desc")
GROUP_MAX_CHARS = 200  # a group id is the file's value as text: a longer one is no id of a real run


@dataclass(frozen=True)
class PromptsView:
    """The prompts page's URL: ``/prompts?run=R&view=never&trend=regressed&q=re&min_steps=3&sort=..&order=..
    &page=2`` for the list, ``&prompt=KEY`` for one prompt, and with ``&step=S`` the prompt's groups at step S
    side by side (``&group=G``: only the group whose ``group_id`` is G). ``to_query()`` omits defaults."""

    run: str | None = None
    prompt: str | None = None
    view: str = "all"
    trend: str | None = None
    q: str | None = None
    min_steps: int | None = None
    sort: str = DEFAULT_SORT
    order: str = "asc"
    page: int = 1
    step: int | None = None
    group: str | None = None

    @classmethod
    def from_query(
        cls, query: Mapping, runs: list[str] | None = None, unreadable: Mapping[str, str] | None = None
    ) -> tuple[PromptsView, list[str]]:
        """Decode a parsed query or ``layout(**query)``; each bad value falls back with a notice.

        With ``runs``, an unknown run falls back to the first run (notice); with no run, the first run.
        """
        msgs = key_notices(query, (f.name for f in fields(cls)))
        run = first(query, "run") or None
        if runs is not None:
            asked, run = run, shown_run(paths.PROMPTS, run, runs)
            if notice := unknown_run_notice(paths.PROMPTS, asked, run, runs, unreadable):
                msgs.append(notice)
        prompt = first(query, "prompt") or None
        if prompt is not None and not PROMPT_KEY_RE.fullmatch(prompt):
            msgs.append(f"Ignored prompt={prompt!r}: a prompt key is 16 hexadecimal digits.")
            prompt = None
        view = get_choice(query, "view", VIEWS, msgs, "all")
        trend = get_choice(query, "trend", TRENDS, msgs, None)
        q, valid = get_regex(query, "q", msgs)
        q = q if valid else None
        min_steps = get_int(query, "min_steps", msgs, None)
        if min_steps is not None and min_steps < 1:
            msgs.append(f"Ignored min_steps={min_steps}: expected 1 or more.")
            min_steps = None
        raw_sort = first(query, "sort")
        sort = SORT_ALIASES.get(raw_sort, raw_sort) if raw_sort else None
        if sort is not None and sort not in SORT_COLUMNS:
            msgs.append(f"Ignored sort={raw_sort!r}: expected one of {', '.join(SORT_COLUMNS)}.")
            sort = None
        order = get_choice(query, "order", ORDERS, msgs, None)
        page = get_int(query, "page", msgs, 1)
        if page is None or page < 1:
            msgs.append(f"Ignored page={page}: pages count from 1.")
            page = 1
        sort = sort or DEFAULT_SORT
        step = get_int(query, "step", msgs, None)
        group = first(query, "group") or None
        if group is not None and len(group) > GROUP_MAX_CHARS:
            msgs.append(f"Ignored group=…: a group id of more than {GROUP_MAX_CHARS} characters.")
            group = None
        if prompt is None and (step is not None or group is not None):
            msgs.append("Ignored step= and group=: they name a group of one prompt (prompt=KEY).")
            step = group = None
        elif step is None and group is not None:
            msgs.append(f"Ignored group={group!r}: a group is of one step (step=S).")
            group = None
        view = cls(run, prompt, view, trend, q, min_steps, sort, order or "asc", page, step, group)
        return view, msgs

    def to_query(self) -> str:
        """The query string of this view, defaults left out ('' when everything is a default)."""
        return encode(
            [
                ("run", self.run),
                ("prompt", self.prompt),
                ("view", None if self.view == "all" else self.view),
                ("trend", self.trend),
                ("q", self.q),
                ("min_steps", self.min_steps),
                ("sort", None if self.sort == DEFAULT_SORT else self.sort),
                ("order", None if self.order == "asc" else self.order),
                ("page", None if self.page == 1 else self.page),
                ("step", self.step),
                ("group", self.group),
            ]
        )

    def from_controls(self, view, trend, min_steps, q) -> PromptsView:
        """This view after the list's controls changed (the radio ``view``, ``trend``, the fewest steps, the
        search): back to page 1 when anything changed."""
        steps = int(min_steps) if isinstance(min_steps, int | float) and min_steps >= 1 else None
        new = replace(
            self,
            view=view if view in VIEWS else "all",
            trend=trend or None,
            min_steps=steps,
            q=(q or "").strip() or None,
        )
        return self if new == self else replace(new, page=1)

    def sorted_by(self, column: str) -> PromptsView:
        """The view after a click on ``column``'s header: same column flips the order, another column
        takes its natural order (``SORT_COLUMNS``); back to page 1."""
        if column == self.sort:
            order = "desc" if self.order == "asc" else "asc"
        else:
            order = SORT_COLUMNS.get(column, "asc")
        return replace(self, sort=column, order=order, page=1)
