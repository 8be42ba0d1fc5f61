"""The token page's answer (``/api/v1/tokens?run=R&sample=ID&metric=kl``): the response shown (run, step,
file and line, how it ended, its links), its token table (``tokens-table``, the answer's ``rows``: one row
per position the strip shows, with every per-token metric a token's hover text shows, at full precision),
the per-position charts (``tokens-chart-<name>``: the page's pattern id ``{"type": "tokens-chart", "name":
<name>}``), the top-token tables, the key figures and the gap line as small tables, and the strip
(``strips["tokens-strip"]``) coloured by the metric the page colours it by.

Everything comes from :func:`data.token_page.token_page`, the composition the page's body draws from, and
the page's own builders (``components.token_page``): the figures are the ones the page's chart callback
returns; the strip's colours are those of the data the page sends its browser code (see
:func:`components.token_page.strip_paint`).
"""

from __future__ import annotations

from api.answer import Answer, Strip, Table
from api.registry import store_info
from components import token_page as tp
from data import annotations, tokens
from data.service import board
from data.token_page import TokenPage, chart_inputs, token_page
from data.views import paths
from data.views import tokens as views
from data.views.tokens import TokensState

PATH, NAME = paths.TOKENS, "tokens"
STORE_WAIT = 10.0  # as the page: how long a first answer waits for the run's first read
TABLE = "tokens-table"
STRIP = "tokens-strip"
TOP_IDS = {"log_ratio": "tokens-top-log-ratio", "kl": "tokens-top-kl"}
TOP_COLUMNS = ("pos", "token", "is_pad", "logprob", "ref_logprob", "log_ratio", "kl")
# The token table's columns before the metrics: where, what the file gives, what the strip shows, marks.
TOKEN_COLUMNS = ("pos", "token", "text", "is_pad", "masked")
TOKEN_LABELS = {
    "pos": "position",
    "token": "token (as the file gives it)",
    "text": "shown as",
    "is_pad": "pad",
    "masked": "dropped by the loss mask",
    "touched": "clipped or masked by the correction in the URL",
}


def answer(query: dict[str, list[str]]) -> Answer:
    b = board()
    state, notes = TokensState.from_query(query)
    page = token_page(state, notes, b, STORE_WAIT)
    run = page.state.run
    store = b.store(run, wait=0) if run in b.runs() else None
    notices = list(page.notices)
    if page.problem == views.INGESTING:
        notices.append(b.reading_text(run))
    elif page.problem in views.EMPTY_TITLES:
        notices.append(views.EMPTY_TITLES[page.problem] + ".")
    out = Answer(PATH, _view(page), run=run, notices=notices, store=store_info(store))
    if page.view is None:
        return out
    out.tables["tokens-stats"] = Table(
        ["metric", "label", "value"],
        [{"metric": k, "label": lab, "value": v} for k, (lab, v, _) in zip(tokens.KEY_FIGURES, page.key_figures, strict=True)],
    )  # fmt: skip
    out.tables["tokens-texts"] = Table(["name", "text"], [{"name": n, "text": t} for n, t in page.texts])
    out.tables["tokens-annotations"] = _annotations(b.settings, run, page.state.sample)
    if page.strip is None:
        out.notices.append(tokens.NO_TOKEN_FIELDS)
        return out
    out.notices.extend(page.strip.lacks)
    _tokens(out, page)
    labels = tokens.metric_labels(page.view.file_fields)
    for by, rows, title in page.top:
        out.tables[TOP_IDS[by]] = Table(
            list(TOP_COLUMNS), rows.select(TOP_COLUMNS).to_dicts(), {k: labels.get(k, k) for k in TOP_COLUMNS}
        )
        out.view.setdefault("table_titles", {})[TOP_IDS[by]] = title
    if page.gap:
        out.tables["tokens-gap"] = Table(
            ["label", "value"], [{"label": k, "value": v} for k, v, _ in page.gap]
        )
    visible, fields, chart_labels, file_fields = chart_inputs(page.state, page.view)
    for name in tp.chart_names(fields, file_fields):
        out.figures[f"tokens-chart-{name}"] = tp.chart_figure(name, visible, chart_labels, file_fields)
    return out


def _tokens(out: Answer, page: TokenPage) -> None:
    """The token table (the answer's main rows) and the strip, both over the positions the strip shows."""
    s = page.strip
    shown = s.shown
    marks_cols = [c for c in ("touched",) if c in shown.columns]
    metric_cols = [c for c, _ in s.hover]
    columns = [*TOKEN_COLUMNS, *marks_cols, *metric_cols]
    labels = {**TOKEN_LABELS, **dict(s.hover)}
    rows = shown.select(columns).to_dicts()
    out.tables[TABLE] = Table(columns, rows, {c: labels[c] for c in columns}, total=len(rows))
    out.main = TABLE
    bg, fg = tp.strip_paint(shown, s.metric, s.scale)
    values = shown.get_column(s.metric).cast(float).to_list() if s.metric else [None] * shown.height
    out.strips[STRIP] = Strip(
        metric=s.metric or "",
        label=s.label,
        tokens=shown.get_column("text").to_list(),
        values=values,
        colours=bg,
        caption=tp.strip_caption(s.metric, s.scale),
        marks=[_marks(r, page.state.pos) for r in rows],
        text_colours=fg,
    )


def _marks(row: dict, pos: int | None) -> str:
    """What the strip marks a token as: ``pad`` (greyed), ``masked`` (hatched: the loss mask drops it),
    ``touched`` (wavy underline: the URL's correction clips or masks it), ``selected`` (outlined: the URL's
    ``pos``), comma-separated; "" for none."""
    marks = [
        name
        for name, on in (
            ("pad", row["is_pad"]),
            ("masked", row["masked"]),
            ("touched", row.get("touched")),
            ("selected", pos is not None and row["pos"] == pos),
        )
        if on
    ]
    return ", ".join(marks)


def _view(page: TokenPage) -> dict:
    """The resolved view state: the URL's (as the page decodes it, run and sample filled in), the metric the
    strip is coloured by, the response's place (file, line, step), how it ended, its links and its scale."""
    st = page.state
    view = {
        "run": st.run,
        "sample": st.sample,
        "metric": st.metric,
        "pads": st.pads,
        "back": st.back,
        "step": st.step,
        "rule": st.rule,
        "c": st.c,
        "pos": st.pos,
        "query": st.to_query(),
        "problem": page.problem,
    }
    if page.view is None:
        return view
    info, s = page.view.info, page.strip
    view.update(
        response_step=info.get("step"),
        source=info.get("source"),
        line=info.get("line"),
        source_line=page.source_line,
        end=page.end,
        truncated=None if page.end is None else page.end == "truncated",
        nav=page.nav_text,
        links={
            "prev": page.prev_href,
            "next": page.next_href,
            "back": page.back_href,
            "group": page.group_href,
        },
        metric_shown=None if s is None else s.metric,
        tokens_shown=None if s is None else s.shown.height,
        pads_hidden=None if s is None else s.hidden,
        keys=[] if s is None else [text for _, text in s.keys],
    )
    if s is not None and s.scale is not None:
        sc = s.scale
        view["scale"] = {
            "kind": sc.kind,
            "lo": sc.lo,
            "hi": sc.hi,
            "signed": sc.signed,
            "knee": sc.knee,
            "clipped_at_max": None if sc.clip is None else sc.clip[0],
            "ticks": [list(t) for t in sc.ticks()],
        }
    return view


ANNOTATION_COLUMNS = ("label", "note", "first", "last", "who", "when")


def _annotations(settings, run: str, sample: str | None) -> Table:
    """The response's annotations as the token page's card lists them (data.annotations, the latest line
    of each label and span): ``first``/``last`` the span's token positions, null for the whole response."""
    held = annotations.of_run(settings, run).of(sample) if sample else []
    rows = [
        {"label": a.label, "note": a.note, "first": a.span[0] if a.span else None,
         "last": a.span[1] if a.span else None, "who": a.who, "when": a.when}
        for a in held
    ]  # fmt: skip
    return Table(list(ANNOTATION_COLUMNS), rows)
