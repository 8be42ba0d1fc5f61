"""A text search has a bounded cost: a pattern too large once compiled is refused at once, a search that runs
too long is stopped at its deadline with a message, and the server keeps answering meanwhile (real gunicorn,
as the image runs it)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from tests.integration.test_gunicorn import GunicornServer
from tests.waiting import wait_until

RUN = "long-texts"
# Runs of 'a' one shorter than the pattern below: every position starts a near-match, which is what makes
# a large compiled pattern slow on Rust's regex (92 s for one 1 MB text, measured before the bound).
TEXT = ("a" * 9_999 + "b") * 100  # 1 MB
SLOW = "(a{100}){100}"  # ~320 KiB compiled: under the size limit, so only the deadline stops it
HUGE = "((a{50}){50}){50}"  # ~4 MiB compiled: refused before any search
SECONDS = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    (root / RUN).mkdir()
    lines = [
        {"prompt": f"prompt {i}", "response": TEXT if i < 4 else f"short answer {i}", "reward": i, "step": 1}
        for i in range(6)
    ]
    (root / RUN / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cache = tmp_path_factory.mktemp("cache")
    with GunicornServer(root, cache, RLBOARD_SEARCH_SECONDS=SECONDS) as srv:
        r = requests.get(
            srv.base + "/export", params={"run": RUN, "step": "all", "format": "jsonl"}, timeout=60
        )
        assert r.status_code == 200 and r.text.count("\n") == 6
        yield srv


def test_search001_costly_regex_is_stopped_while_healthz_answers(server):
    """Two exports with a pathological regex and one with a huge one, at once: the huge one is refused at
    once, the slow ones answer 400 "stopped after 3 s" within the bound, and /healthz answers every probe
    in under 2 s throughout; afterwards an ordinary search works (the helpers were replaced)."""
    results: dict[str, tuple[int, str, float]] = {}

    def export(name: str, q: str) -> None:
        t0 = time.monotonic()
        try:
            r = requests.get(server.base + "/export", params={"run": RUN, "step": "all", "q": q}, timeout=60)
            results[name] = (r.status_code, r.text, time.monotonic() - t0)
        except requests.RequestException as e:
            results[name] = (0, repr(e), time.monotonic() - t0)

    threads = [
        threading.Thread(target=export, args=(name, q))
        for name, q in (("slow1", SLOW), ("slow2", SLOW), ("huge", HUGE))
    ]
    probes: list[tuple[int, float]] = []
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        t0 = time.monotonic()
        try:
            status = requests.get(server.base + "/healthz", timeout=2).status_code
        except requests.RequestException:
            status = 0
        probes.append((status, time.monotonic() - t0))
        time.sleep(0.2)  # the thing under test: a probe every 0.2 s while the searches run
    for t in threads:
        t.join()

    status, text, took = results["huge"]
    assert status == 400 and "refused" in text and "1024 KiB" in text, results["huge"]
    assert took < 5, took
    for name in ("slow1", "slow2"):
        status, text, took = results[name]
        assert status == 400, (name, results[name][:2])
        assert f"was stopped after {SECONDS} s" in text, text
        # The deadline, plus a helper's start (Python and Polars) on a loaded machine.
        assert took < SECONDS + 12, (name, took)
    assert probes and all(s == 200 for s, _ in probes), probes
    assert max(dt for _, dt in probes) < 2, probes

    r = requests.get(server.base + "/export", params={"run": RUN, "step": "all", "q": "^short answer [45]$"})
    assert r.status_code == 200 and r.text.count("\n") == 3, r.text[:300]


def test_search002_stopped_search_on_the_responses_page(server):
    """The responses page says the search was stopped (summary and under the search box) and shows no rows;
    a refused pattern is a notice and is not applied."""
    from tests.conftest import router_body

    deps = requests.get(server.base + "/_dash-dependencies", timeout=30).json()

    def call(input_id: str, prop: str, value, state=()) -> dict:
        """POST the server callback whose input is ``input_id.prop``, as the renderer does; its response by id
        (a clientside callback of the same input runs in the browser)."""
        dep = next(
            d
            for d in deps
            if [(i["id"], i["property"]) for i in d["inputs"]] == [(input_id, prop)]
            and not d.get("clientside_function")
        )
        outputs = [o.rsplit(".", 1) for o in dep["output"].strip(".").split("...")]
        body = {
            "output": dep["output"],
            "outputs": [{"id": i, "property": p} for i, p in outputs],
            "inputs": [{"id": input_id, "property": prop, "value": value}],
            "state": [{**s, "value": v} for s, v in zip(dep["state"], state, strict=True)],
            "changedPropIds": [f"{input_id}.{prop}"],
        }
        r = requests.post(server.base + "/_dash-update-component", json=body, timeout=60)
        assert r.status_code == 200, r.text[:300]
        return r.json()["response"]

    view = f"?run={RUN}&step=all&q={SLOW}"
    got = call("responses-view", "data", view)
    # A search over every step is counted in the background: the page polls until it is done (or stopped).

    def polled() -> dict | None:
        got = call("responses-count-poll", "n_intervals", 1, [view])
        return None if got["responses-count-poll"]["disabled"] is False else got

    if got["responses-count-poll"]["disabled"] is False:
        got = wait_until(polled, SECONDS + 120, "the background count to end (its poll disabled)", 0.5)
    assert got["responses-count-poll"]["disabled"] is True
    assert got["responses-summary"]["children"] == "No rows: the text search was stopped."
    assert got["responses-q-error"]["children"].startswith(f"The search for '{SLOW}' was stopped after 3 s")
    page = requests.post(
        server.base + "/_dash-update-component",
        json=router_body("/responses", f"?run={RUN}&step=all&q={HUGE}"),
        timeout=60,
    )
    assert page.status_code == 200  # the refusal is said beside the search box (not in the banner too)
    got = call("responses-view", "data", f"?run={RUN}&step=all&q={HUGE}")
    assert "refused: compiled, it is larger than 1024 KiB" in got["responses-q-error"]["children"]


def test_search003_stopped_search_in_the_api(server):
    """The responses page's JSON answer of a search stopped at its deadline: no rows, and why, in its
    notices and its table's cut-off (as the page says under the search box); a refused pattern is a notice."""
    r = requests.get(server.base + "/api/v1/responses", params={"run": RUN, "step": 1, "q": SLOW}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    got = r.json()
    assert got["rows"] == [] and got["tables"]["responses-grid"]["total"] == 0
    assert any(n.startswith(f"The search for '{SLOW}' was stopped after {SECONDS} s") for n in got["notices"])
    assert f"was stopped after {SECONDS} s" in got["tables"]["responses-grid"]["cut_off"]
    r = requests.get(server.base + "/api/v1/responses", params={"run": RUN, "q": HUGE}, timeout=60)
    assert r.status_code == 200 and any("refused" in n for n in r.json()["notices"])
