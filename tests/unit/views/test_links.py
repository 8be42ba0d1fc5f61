"""Every cross-page link (data/views/links.py): the path and query string of each, percent-encoded."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from data.run_context import RunContext
from data.views import links
from data.views.prompts import PromptsView
from data.views.responses import ResponsesView


def _parts(url: str) -> tuple[str, dict]:
    u = urlsplit(url)
    return u.path, parse_qs(u.query, keep_blank_values=True)


def test_links001_run_pages_encode_the_run_name():
    """A run's pages name it exactly, whatever it holds; the runs page and the navbar's Runs take no run."""
    for name in ("c#d", "e+f 50%", "x&run=y", "%2e%2e", "space at end "):
        path, q = _parts(links.run_page("/reward", name))
        assert path == "/reward" and q == {"run": [name]}
    assert links.run_page("/prompts", None) == "/prompts"
    assert links.nav("/", "r") == "/" and links.nav("/responses", "r") == "/responses?run=r"
    assert links.run_page("/reward", "r", prefix="/rlboard") == "/rlboard/reward?run=r"


def test_links002_token_page_links():
    """A response's token page, with the way back to the responses view it came from; many at once read
    the same as one at a time; the token page's own settings ride along only when not the defaults."""
    assert links.tokens("r", "ab-1") == "/tokens?run=r&sample=ab-1"
    assert links.tokens_many("r&s", ["ab-1", "c d"], "/p") == [
        links.tokens("r&s", "ab-1", prefix="/p"),
        links.tokens("r&s", "c d", prefix="/p"),
    ]
    view = ResponsesView(run="r", step=3, sort="kl_mean", reward_min=0.5)
    path, q = _parts(links.row_tokens(view, "ab-2"))
    assert path == "/tokens" and q["run"] == ["r"] and q["sample"] == ["ab-2"]
    assert q["back"] == ["run=r&step=3&sort=kl_mean&reward_min=0.5&sample=ab-2"]
    assert links.tokens("r", "s", "run=r", metric="log_ratio", pads=True) == (
        "/tokens?run=r&sample=s&metric=log_ratio&pads=1&back=run%3Dr"
    )
    assert links.responses_back("run=r&step=3", "r") == "/responses?run=r&step=3"
    assert links.responses_back("", "x&y") == "/responses?run=x%26y"


def test_links003_bar_responses_export_and_prompts():
    """A histogram bar opens exactly its interval; the export takes the view without its selected row; a
    prompts view links to itself."""
    assert links.bar_responses("r", 4, "gain", -0.5, 0.25) == (
        "/responses?run=r&step=4&gain_min=-0.5&gain_max=0.25"
    )
    assert links.bar_responses("r", 4, "reward", 2.0, None) == "/responses?run=r&step=4&reward_min=2"
    view = ResponsesView(run="r", step="all", sample="ab-1")
    assert links.export(view, "csv") == "/export?run=r&step=all&format=csv"
    assert links.export(ResponsesView(), "jsonl", "/p") == "/p/export?format=jsonl"
    assert links.prompts(PromptsView(run="r", view="never", page=2)) == "/prompts?run=r&view=never&page=2"


def test_links004_navbar_carries_the_step_between_reward_and_responses():
    """A step number of the run shown goes from the reward page to the responses page and back; not 'all',
    not another run's, not to or from other pages; the runs page takes nothing."""
    q, r, s = {"run": ["r"], "step": ["6"]}, RunContext("r"), RunContext("s")
    assert links.carried_step("/reward", q, r) == "6" and links.carried_step("/responses", q, r) == "6"
    assert links.carried_step("/tokens", q, r) is None and links.carried_step("/reward", q, s) is None
    assert links.carried_step("/responses", {"run": ["r"], "step": ["all"]}, r) is None
    assert links.carried_step("/reward", {"step": ["6"]}, r) is None
    assert links.carried_step("/reward", {"run": ["r"], "step": ["-3"]}, r) == "-3"
    assert links.carried_step("/reward", {"run": ["r"], "step": ["٣"]}, r) is None  # an Arabic-Indic 3
    assert links.nav("/responses", "r", step="6") == "/responses?run=r&step=6"
    assert links.nav("/prompts", "r", step="6") == "/prompts?run=r"
    # The token page takes the step too: it opens that step's response of the largest KL.
    assert links.nav("/tokens", "r", step="6") == "/tokens?run=r&step=6"
    assert links.nav("/", "r", step="6") == "/" and links.nav("/reward", None, step="6") == "/reward"
    assert links.nav("/reward", "a&b", "/p") == "/p/reward?run=a%26b"


def test_links006_navbar_carries_the_step_shown():
    """A step the run lacks is carried as the step the page shows for it (the run's rule), so the navbar's
    link opens what the page shows; a step of a run with nothing committed yet is carried as it is."""
    ctx = RunContext("r", None, (1, 2, 5, 9))
    assert links.carried_step("/reward", {"run": ["r"], "step": ["4"]}, ctx) == "2"
    assert links.carried_step("/responses", {"run": ["r"], "step": ["0"]}, ctx) == "1"
    assert links.carried_step("/responses", {"run": ["r"], "step": ["9"]}, ctx) == "9"


def test_links005_reward_hacking_points_and_view_words():
    """A reward-hacking point opens its step's responses: the most repetitive first, those with no end
    token, those the search matches (none without a search); a view reads back in words, as the token
    page shows it, and truncated=1 round-trips."""
    from data.views.responses import ResponsesView

    assert links.signal_responses("r", 5, "repetition_mean") == "/responses?run=r&step=5&sort=repetition"
    assert links.signal_responses("r", 5, "truncated_share") == "/responses?run=r&step=5&truncated=1"
    assert links.signal_responses("r", 5, "match_share", "(?i)as an ai", "/p") == (
        "/p/responses?run=r&step=5&q=%28%3Fi%29as+an+ai"
    )
    assert links.signal_responses("r", 5, "match_share") is None
    assert links.signal_responses("r", 5, "win_rate") is None
    view, notes = ResponsesView.from_query(
        {"run": ["r"], "step": ["3"], "reward_min": ["1.5"], "kl_max": ["0.2"], "q": ["good"], "truncated": ["1"],
         "loses": ["1"], "sort": ["kl"], "order": ["asc"]}
    )  # fmt: skip
    assert notes == [] and view.truncated and "truncated=1" in view.to_query()
    assert view.describe([1, 2, 3]) == (
        "at step 3 · 1.5 ≤ reward · KL mean per token (k3) < 0.2 · text matching 'good' · losing to the "
        "reference · with no end token (truncated) · sorted by KL mean per token (k3), lowest first"
    )
    flt = view.response_filter([1, 2, 3], (("<pad>",), ("</s>",)))
    assert flt.truncated == (("<pad>",), ("</s>",)) and view.cleared().truncated is False


def test_links007_rows_tokens_are_each_rows_link(monkeypatch):
    """The grid's row links made at once (``rows_tokens``: one link filled in) are ``row_tokens`` of each
    row, character for character: sample ids a query string must encode (spaces, ``&=+%/``, accents, the
    stand-in id itself), views with a search, ranges and columns, a search holding the stand-in id (then
    built one by one), a token filter's rows each at its position, a URL prefix, no rows. Where it can, it
    builds two links (the stand-in's, the first row's to check), not one a row."""
    samples = ["a.jsonl-3", "x y&z=1+2", "100%/ü", "é-7.2", links._SAMPLE, "rlbSample0rlbSample0"]
    views = [
        ResponsesView(run="r", step=3),
        ResponsesView(
            run="c#d&e", step="all", sort="kl_mean", q="(?i)a b&c=d+é%", reward_min=0.5, cols=("end",)
        ),
        ResponsesView(run="r", step="all", q=f"x{links._SAMPLE}"),
        ResponsesView(run="r", step=2, tok="Ġthe", tok_min=0.5),
    ]
    positions = [3, None, 0, 12, 5, 1]
    for view in views:
        for prefix in ("", "/p"):
            got = links.rows_tokens(view, samples, prefix, positions)
            assert got == [
                links.row_tokens(view, s, prefix, p) for s, p in zip(samples, positions, strict=True)
            ]
            assert links.rows_tokens(view, samples, prefix) == [
                links.row_tokens(view, s, prefix) for s in samples
            ]
            assert links.rows_tokens(view, [], prefix, []) == []
    assert "pos=12" in links.rows_tokens(views[3], samples, "", positions)[3]
    built, one = [], links.row_tokens
    monkeypatch.setattr(links, "row_tokens", lambda *a: built.append(a) or one(*a))
    assert links.rows_tokens(views[1], samples, "/p") == [one(views[1], s, "/p") for s in samples]
    assert len(built) == 2


def test_links008_a_prompts_groups_are_each_groups_link():
    """The links of a prompt's groups, made with the run and prompt encoded once, are :func:`links.group` of
    each (runs, prompt keys and group ids that need encoding, no group id, step 0, no step, no prompt)."""
    found = [
        {"step": 25, "group_id": "99"},
        {"step": 0, "group_id": None},
        {"step": 7},
        {"step": None, "group_id": "g"},
        {"step": 3, "group_id": "a b&group=c/%2e 🙂"},
        {"step": -2, "group_id": 0},
    ]
    for run in ("trl-ppo-small", "c#d & e+f 50%", None):
        for key in ("1b3d14969cab0edb", "k&prompt=x", ""):
            for prefix in ("", "/lab"):
                want = [links.group(run, key, g["step"], g.get("group_id"), prefix) for g in found]
                assert links.groups(run, key, found, prefix) == want, (run, key, prefix)
    assert links.groups("r", "k", found[:1]) == ["/prompts?run=r&prompt=k&step=25&group=99"]
