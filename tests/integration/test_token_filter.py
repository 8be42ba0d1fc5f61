"""The token filter through the server: ``/export`` with ``tok=…&tok_metric=kl&tok_min=…`` on the real TRL GRPO
fixture, against a hand computation over its JSON lines (TRL's k3: huggingface/trl
``trl/trainer/grpo_trainer.py`` lines 3071-3072 at f2cd577), and a bad token parameter refused."""

from __future__ import annotations

import csv
import io
import json
from urllib.parse import quote

import pytest

from tests.unit.test_token_filter import FINAL_DOT, by_hand

RUN = "trl-grpo-small"


def get_csv(client, query):
    r = client.get("/export?" + query)
    assert r.status_code == 200, r.data[:300]
    return list(csv.DictReader(io.StringIO(r.data.decode("utf-8"))))


@pytest.mark.parametrize("lo", [100, 5])
def test_tokfilter101_export_matches_hand(client, fixtures_dir, lo):
    """``tok=^Ġ\\.$&tok_metric=kl&tok_min=lo``: the exported rows are exactly those computed by hand, each
    with its first kept token's position and k3."""
    rows = get_csv(client, f"run={RUN}&step=all&tok={quote(FINAL_DOT)}&tok_metric=kl&tok_min={lo}&format=csv")
    want = by_hand(fixtures_dir, FINAL_DOT, lo, None)
    got = {(r["source"], int(r["line"])): (int(r["tok_pos"]), float(r["tok_value"])) for r in rows}
    assert set(got) == set(want)
    for key, (pos, value) in want.items():
        assert got[key][0] == pos and got[key][1] == pytest.approx(value, rel=1e-9)


def test_tokfilter102_export_refuses_bad_token_parameters(client, fixtures_dir):
    """An invalid token pattern or an unknown per-token metric is a 400 that names it, not a silent export."""
    r = client.get(f"/export?run={RUN}&tok=(&format=csv")
    assert r.status_code == 400 and b"regular expression" in r.data
    r = client.get(f"/export?run={RUN}&tok=x&tok_metric=nope&format=csv")
    assert r.status_code == 400 and b"tok_metric" in r.data


def test_tokfilter103_drift_page_served(client, fixtures_dir):
    """``/drift?run=…&a=1&b=60`` through the pages router: the step rule's notice, the board's first token
    the hand computation's first, and its links to the responses holding it (the token filter of exactly
    it, at step 25)."""
    from tests.conftest import router_body
    from tests.unit.test_token_drift import by_hand as drift_by_hand

    body = router_body("/drift", f"?run={RUN}&a=1&b=60&min_n=2")
    page = client.post("/_dash-update-component", json=body).get_json()
    text = json.dumps(page, ensure_ascii=False)
    first = drift_by_hand(fixtures_dir, 1, 25, 2)[0][0]
    assert "has no step 60: showing step 25" in text
    assert text.index(f'"{first}"') < text.index('"Ġ."')  # ranked above the final " ." (third by hand)
    assert f"/responses?run={RUN}&step=25&tok=%5E%C4%A0%5C.%24&tok_metric=log_ratio" in text
