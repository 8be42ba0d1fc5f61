"""What the pages answer a browser, written by ``components.answers``, is Plotly's own text for every page
of the fixture runs."""

from __future__ import annotations

import dash
import plotly.io.json

from components import answers
from tests.integration.test_security import _page_text

SEARCHES = ("?run=trl-ppo-small&step=3", "?run=trl-grpo-small", "?run=trl-ppo-small&run=trl-grpo-small")


def test_answers101_every_page_is_written_as_plotly_writes_it(dash_app, client, fixtures_dir, monkeypatch):
    """Each page's layout and URL callbacks, on both fixture runs (and compare's pair), answer the same text
    as Plotly's orjson engine would write; the answers hold what the pages draw (figures as typed arrays)."""
    written, differ = [], []

    def both(obj, *args, **kw):
        ours = answers.to_json(obj, *args, **kw)
        written.append(ours)
        if ours != answers.PLOTLY_TO_JSON(obj, *args, **kw):
            differ.append(ours[:200])
        return ours

    assert plotly.io.json.to_json_plotly is answers.to_json  # the app installed it
    monkeypatch.setattr(plotly.io.json, "to_json_plotly", both)
    client.get("/")
    paths = sorted({p["path"] for p in dash.page_registry.values()})
    assert len(paths) >= 8, paths
    for path in paths:
        for search in SEARCHES:
            _page_text(dash_app, client, path, search)
    assert not differ, differ[:3]
    assert len(written) > 3 * len(paths)
    assert sum('"bdata"' in w for w in written) >= 3
