"""The pages' controls: what each page lets the user change, with the values of its view state. Pure:
values, options and ids in, components out; each page's sync callback reads them back into its URL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html, no_update


def _labelled(text: str, control, lg: int) -> dbc.Col:
    """A column with ``control`` under its small muted label (which names the control's id)."""
    return dbc.Col([dbc.Label(text, html_for=control.id, className="small text-muted mb-1"), control], lg=lg)


def _radio(id_: str, options: Mapping[str, str], value: str) -> dbc.RadioItems:
    """Inline radio buttons (``options``: value -> text), each input's id ``<id_>-<value>``."""
    return dbc.RadioItems(
        id=id_,
        options=[{"label": v, "value": k, "input_id": f"{id_}-{k}"} for k, v in options.items()],
        value=value,
        inline=True,
        className="small",
    )


def token_controls(
    options: Sequence[Mapping], metric: str, pads: bool, visible: bool, ids: Mapping[str, str]
) -> html.Div:
    """The token page's metric picker (``options``: ``label``, ``value``, ``disabled``) and pad switch.
    Hidden but present when not ``visible`` (no token to colour), so the sync callback always has its
    inputs. ``ids``: ``metric``, ``pads``."""
    return html.Div(
        [
            html.Span("colour by", className="small text-muted me-2 fw-normal"),
            dcc.Dropdown(
                id=ids["metric"],
                options=list(options),
                value=metric,
                clearable=False,
                searchable=False,
                style={"width": "15rem", "fontSize": "0.85rem", "fontWeight": "normal"},
            ),
            dbc.Switch(
                id=ids["pads"], label="show pad tokens", value=pads, className="small mb-0 ms-3 fw-normal"
            ),
        ],
        # Bootstrap's d-flex is !important: hiding needs its d-none, not an inline style.
        className="d-flex align-items-center" if visible else "d-none",
    )


# ---- the reward page's step, band and zero shift ---------------------------------------------------------


def slider_props(steps: list[int]) -> dict:
    """max, marks and disabled of a step slider. The slider moves over step *indices* (steps may skip
    numbers, and Dash's slider takes at most 500 marks); about eight marks are labelled with their step."""
    if not steps:
        return {"max": 0, "marks": {}, "disabled": True}
    every = max(1, -(-len(steps) // 8))
    idx = sorted(set(range(0, len(steps), every)) | {len(steps) - 1})
    if len(idx) > 2 and idx[-1] - idx[-2] < every / 2:
        idx.pop(-2)  # keep the last label from overlapping its neighbour
    return {"max": len(steps) - 1, "marks": {i: str(steps[i]) for i in idx}, "disabled": False}


def step_index(step: int | None, steps: list[int]) -> int:
    """The slider's position of ``step`` (0 for a step the run does not have)."""
    return steps.index(step) if step in steps else 0


def step_text(step: int | None, steps: list[int]) -> str:
    """The badge beside the slider: ``step 20 · 20 of 48``, or ``no step``."""
    if step is None or step not in steps:
        return "no step"
    return f"step {step} · {steps.index(step) + 1} of {len(steps)}"


def step_updates(shown: int | None, steps: list[int], index, selected, same_run: bool) -> tuple:
    """What the reward page's step controls change to for step ``shown`` (``no_update`` for what is already
    so): the selected step, the badge, the slider's value and, for another run (not ``same_run``), the
    slider's max, marks and disabled state. ``index``, ``selected``: the slider's and the page's now."""
    slider, at = slider_props(steps), step_index(shown, steps)
    return (
        no_update if shown == selected else shown,
        no_update if shown == selected and same_run else step_text(shown, steps),
        no_update if at == index else at,
        *((no_update,) * 3 if same_run else (slider["max"], slider["marks"], slider["disabled"])),
    )


def reward_controls(
    step: int | None,
    steps: list[int],
    band: str,
    bands: Mapping[str, str],
    zero: bool,
    ids: Mapping[str, str],
) -> dbc.Card:
    """The reward page's controls: the step (badge, previous / next buttons and a slider over ``steps``),
    the curves' spread band (``bands``: value -> text) and the zero shift switch. ``ids``: ``step``,
    ``step_text``, ``prev``, ``next``, ``band``, ``zero``."""
    return dbc.Card(
        dbc.CardBody(
            dbc.Row(
                [
                    dbc.Col(
                        [
                            html.Div(
                                [
                                    dbc.Label(
                                        "Step", html_for=ids["step"], className="small text-muted mb-0 me-2"
                                    ),
                                    html.Span(
                                        step_text(step, steps),
                                        id=ids["step_text"],
                                        className="badge text-bg-primary",
                                    ),
                                ],
                                className="d-flex align-items-center",
                            ),
                            html.Div(
                                [
                                    dbc.Button(
                                        html.I(className="bi bi-chevron-left"),
                                        id=ids["prev"],
                                        color="light",
                                        size="sm",
                                        title="previous step",
                                        className="me-1",
                                    ),
                                    html.Div(
                                        dcc.Slider(
                                            id=ids["step"],
                                            min=0,
                                            step=1,
                                            value=step_index(step, steps),
                                            updatemode="mouseup",
                                            allow_direct_input=False,
                                            included=False,
                                            **slider_props(steps),
                                        ),
                                        className="flex-grow-1",
                                    ),
                                    dbc.Button(
                                        html.I(className="bi bi-chevron-right"),
                                        id=ids["next"],
                                        color="light",
                                        size="sm",
                                        title="next step",
                                        className="ms-1",
                                    ),
                                ],
                                className="d-flex align-items-center",
                            ),
                        ],
                        lg=7,
                    ),
                    _labelled("Spread band", _radio(ids["band"], bands, band), lg=3),
                    _labelled(
                        "Compare trends",
                        dbc.Switch(id=ids["zero"], label="zero shift", value=zero, className="small mb-0"),
                        lg=2,
                    ),
                ],
                className="g-3 align-items-end",
            ),
            className="py-2",
        ),
        className="mb-3 shadow-sm",
    )


# ---- the responses page's filters ------------------------------------------------------------------------


def _range_input(text: str, available: bool, lo, hi, ids: tuple[str, str], shown: bool = True) -> html.Div:
    """min <= x < max inputs of one metric; disabled when the run has no value of it (and no bound is set);
    unless ``shown`` only its two inputs, hidden (they stay in the page: the page's one sync callback reads
    them all; a filter is shown when the page is built with a bound of it, e.g. from the scatter)."""
    if not shown:
        return html.Div(
            [dbc.Input(id=ids[0], value=lo, type="number"), dbc.Input(id=ids[1], value=hi, type="number")],
            style={"display": "none"},
        )
    common = {
        "type": "number",
        "step": "any",
        "debounce": True,
        "size": "sm",
        "style": {"width": "5.2rem"},
        "disabled": not available and lo is None and hi is None,
    }
    hint = text if available else f"{text}: not in this run's files"
    return html.Div(
        [
            html.Div(
                text, className="small text-muted text-truncate", title=hint, style={"maxWidth": "14rem"}
            ),
            dbc.InputGroup(
                [
                    dbc.Input(id=ids[0], value=lo, placeholder="min", **common),
                    dbc.InputGroupText("≤ x <", className="px-1 small"),
                    dbc.Input(id=ids[1], value=hi, placeholder="max", **common),
                ],
                size="sm",
                className="flex-nowrap",
            ),
        ],
        className="me-3",
    )


# A run of more steps than this lists some of them in the responses page's step picker (see step_options):
# 5,000 options made the page's JSON 6x larger and slower to build, and no one scrolls through them.
MAX_STEP_OPTIONS = 500


def step_options(
    steps: Sequence[int], all_steps: str, value=None, search: str | None = None, limit: int = MAX_STEP_OPTIONS
) -> list[dict]:
    """The responses page's step picker options: "all steps", then every step of ``steps`` (sorted) when
    there are at most ``limit``. With more: the steps whose number starts with the digits typed
    (``search``), else every k-th step from the first (k the smallest that lists at most ``limit``), and
    always the chosen step ``value``; the last option says how to find the others."""
    head = [{"label": "all steps", "value": all_steps}]
    if len(steps) <= limit:
        return head + [{"label": f"step {s}", "value": s} for s in steps]
    typed = "".join(c for c in (search or "") if c.isdigit() or c == "-")
    if typed:
        shown = [s for s in steps if str(s).startswith(typed)][:limit]
    else:
        shown = list(steps[:: -(-len(steps) // limit)])
    if isinstance(value, int) and value in steps and value not in shown:
        shown = sorted([*shown, value])
    hint = f"type a step number to find any of {len(steps):,}"
    return (
        head
        + [{"label": f"step {s}", "value": s} for s in shown]
        + [{"label": hint, "value": "__hint__", "disabled": True}]
    )


def responses_filters(
    steps: Sequence[int],
    all_steps: str,
    step,
    ranges: Sequence[tuple[str, bool, object, object, tuple[str, str], bool]],
    q: str | None,
    loses: bool,
    ids: Mapping[str, str],
    truncated: bool = False,
    ended: bool = False,
    columns: tuple[Sequence[tuple[str, str]], Sequence[str]] | None = None,
) -> dbc.Card:
    """The responses page's filters: the step (``all_steps`` for every step, else one of ``steps``), one
    ``min <= x < max`` pair per range (``(label, available, lo, hi, (min id, max id), shown)``), the text
    search, the "loses to the reference" switch, the "no end token" and "ended" switches side by side, and
    "Clear filters"; with ``columns`` (``(choices, shown)``: ``(column, label)`` pairs and the columns shown)
    a column chooser on a line of its own. ``ids``: ``step``, ``q``, ``q_error``, ``loses``, ``truncated``,
    ``ended``, ``clear``, ``cols``."""
    picker = html.Div(
        [
            html.Div("step", className="small text-muted"),
            dcc.Dropdown(
                id=ids["step"],
                options=step_options(steps, all_steps, step),
                value=step,
                clearable=False,
                style={"width": "8.5rem", "fontSize": "0.85rem"},
            ),
        ],
        className="me-3",
    )
    search = html.Div(
        [
            html.Div("search prompt and response (regular expression)", className="small text-muted"),
            dbc.Input(
                id=ids["q"],
                type="text",
                value=q or "",
                debounce=True,
                size="sm",
                placeholder="e.g. (?i)great|\\bthe the\\b",
                style={"width": "17rem"},
            ),
            html.Div(id=ids["q_error"], className="small text-danger"),
        ],
        className="me-3",
    )
    switch = html.Div(
        [
            dbc.Switch(
                id=ids["loses"],
                label="only responses that lose to the reference",
                value=loses,
                className="small mb-0",
            ),
            html.Div(
                [
                    dbc.Switch(
                        id=ids["truncated"],
                        label="only responses with no end token (truncated)",
                        value=truncated,
                        className="small mb-0 me-3",
                    ),
                    dbc.Switch(
                        id=ids["ended"],
                        label="only responses that ended (end token)",
                        value=ended,
                        className="small mb-0",
                    ),
                ],
                className="d-flex flex-wrap",
            ),
        ],
        className="me-3 align-self-center pt-1",
    )
    clear = dbc.Button(
        "Clear filters", id=ids["clear"], size="sm", color="link", className="align-self-center pt-3 px-0"
    )
    return dbc.Card(
        dbc.CardBody(
            html.Div(
                [picker, *(_range_input(*r) for r in ranges), search, switch, clear],
                className="d-flex flex-wrap align-items-start gap-1",
            ),
            className="py-2",
        )
        if columns is None
        else dbc.CardBody(
            [
                html.Div(
                    [picker, *(_range_input(*r) for r in ranges), search, switch, clear],
                    className="d-flex flex-wrap align-items-start gap-1",
                ),
                column_chooser(*columns, ids["cols"]),
            ],
            className="py-2",
        ),
        className="mb-2",
    )


def column_chooser(choices: Sequence[tuple[str, str]], shown: Sequence[str], chooser_id: str) -> html.Div:
    """The responses table's column chooser: a multi-select of ``choices`` (``(column, label)``) set to the
    columns ``shown``; the file:line and the text previews are always shown."""
    return html.Div(
        [
            html.Span("columns", className="small text-muted me-2"),
            dcc.Dropdown(
                id=chooser_id,
                options=[{"label": text, "value": key} for key, text in choices],
                value=list(shown),
                multi=True,
                clearable=False,
                placeholder="the run's default columns",
                style={"minWidth": "30rem", "fontSize": "0.8rem"},
                className="flex-grow-1",
            ),
        ],
        className="d-flex align-items-center mt-1",
    )


# ---- the prompts page's list filters ---------------------------------------------------------------------


def prompts_controls(
    view: str,
    views: Mapping[str, str],
    trend: str | None,
    trends: Mapping[str, str],
    min_steps: int | None,
    q: str | None,
    hidden: bool,
    ids: Mapping[str, str],
) -> dbc.Card:
    """The prompt list's filters: which prompts (``views``: value -> text), a trend (``trends``), the
    fewest steps a prompt is seen in and a search of the prompt text; ``hidden`` on one prompt's page.
    ``ids``: ``card``, ``view``, ``trend``, ``min_steps``, ``q``."""
    return dbc.Card(
        dbc.CardBody(
            dbc.Row(
                [
                    _labelled("Show", _radio(ids["view"], views, view), lg=4),
                    _labelled(
                        "Trend",
                        dcc.Dropdown(
                            id=ids["trend"],
                            options=[{"label": v, "value": k} for k, v in trends.items()],
                            value=trend,
                            placeholder="any trend",
                            clearable=True,
                            className="small",
                        ),
                        lg=2,
                    ),
                    _labelled(
                        "Seen in at least … steps",
                        dbc.Input(
                            id=ids["min_steps"],
                            type="number",
                            min=1,
                            step=1,
                            value=min_steps,
                            debounce=True,
                            size="sm",
                            placeholder="any",
                        ),
                        lg=2,
                    ),
                    _labelled(
                        "Search the prompt text",
                        dbc.Input(
                            id=ids["q"],
                            type="search",
                            value=q or "",
                            debounce=True,
                            size="sm",
                            placeholder="regular expression, (?i) for any case; Enter to apply",
                        ),
                        lg=4,
                    ),
                ],
                className="g-3 align-items-end",
            ),
            className="py-2",
        ),
        id=ids["card"],
        className="mb-3 shadow-sm",
        style={"display": "none"} if hidden else {},
    )
