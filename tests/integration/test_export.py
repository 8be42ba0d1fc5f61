"""The /export route through the Flask test client, checked against answers computed straight from the
fixture JSON-lines files with the json module (not through the store)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from data.export import EXPORT_COLUMNS
from data.store import sample_id

RUN = "trl-ppo-small"


@pytest.fixture(scope="module")
def records(fixtures_dir):
    """Every record of the PPO fixture with its file and 1-based line."""
    out = []
    for name in ("rank0.jsonl", "rank1.jsonl"):
        with open(fixtures_dir / RUN / name, encoding="utf-8") as f:
            for n, text in enumerate(f, start=1):
                if text.strip():
                    out.append({**json.loads(text), "source": name, "line": n})
    return out


def expected(records, keep, key="reward", descending=True):
    """(source, line) of the kept records sorted by ``key`` then by sample id, as the export should be."""
    rows = [r for r in records if keep(r)]
    rows.sort(key=lambda r: sample_id(r["source"], r["line"]))
    rows.sort(key=lambda r: r[key], reverse=descending)  # stable: ties stay in sample-id order
    return [(r["source"], r["line"]) for r in rows]


def get_csv(client, query):
    r = client.get("/export?" + query)
    assert r.status_code == 200, r.data[:300]
    return list(csv.DictReader(io.StringIO(r.data.decode("utf-8"))))


def test_export101_step_sorted_by_reward_matches_fixture(client, records):
    """step 3 by reward descending: same responses, same order (ties by sample id), same texts."""
    rows = get_csv(client, f"run={RUN}&step=3&sort=reward&order=desc&format=csv")
    want = expected(records, lambda r: r["step"] == 3)
    assert len(rows) == len(want) == 16
    assert [(r["source"], int(r["line"])) for r in rows] == want
    by_loc = {(r["source"], r["line"]): r for r in records}
    for row in rows:
        rec = by_loc[(row["source"], int(row["line"]))]
        assert float(row["reward"]) == rec["reward"] and float(row["ref_reward"]) == rec["ref_reward"]
        assert (row["prompt"], row["response"]) == (rec["prompt"], rec["response"])
        assert row["sample_id"] == sample_id(row["source"], int(row["line"]))
    assert list(rows[0]) == [
        *(c for c in EXPORT_COLUMNS),
        "prompt_id",
        "ends_with_eos",
        "prompt",
        "response",
        "ref_response",
    ]


def test_export102_filters_match_fixture(client, records):
    """loses=1 over all steps, a reward bar (half-open), and a regex give the hand-counted rows."""
    rows = get_csv(client, f"run={RUN}&step=all&loses=1&sort=reward_gain&order=asc")
    want = [r for r in records if r["reward"] < r["ref_reward"]]
    assert len(rows) == len(want) > 0
    gains = [float(r["reward_gain"]) for r in rows]
    assert gains == sorted(gains)

    rows = get_csv(client, f"run={RUN}&step=all&reward_min=2&reward_max=2.5&sort=step&order=asc")
    assert [(r["source"], int(r["line"])) for r in rows] == expected(
        records, lambda r: 2 <= r["reward"] < 2.5, key="step", descending=False
    )

    pattern = r"\brude\b|ugly"
    rows = get_csv(client, f"run={RUN}&step=all&q={pattern}")
    hits = [r for r in records if re.search(pattern, r["prompt"]) or re.search(pattern, r["response"])]
    assert len(rows) == len(hits) > 0


def test_export103_jsonl_and_headers(client, records):
    """format=jsonl streams one JSON object per response with a download file name."""
    r = client.get(f"/export?run={RUN}&step=25&format=jsonl")
    assert r.status_code == 200 and r.is_streamed
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    assert r.headers["Content-Disposition"] == f'attachment; filename="{RUN}-step25.jsonl"'
    lines = [json.loads(x) for x in r.data.decode().splitlines()]
    assert len(lines) == sum(1 for x in records if x["step"] == 25)
    rewards = [x["reward"] for x in lines]
    assert rewards == sorted(rewards, reverse=True)  # the page's default sort: reward, descending


def test_export104_default_step_is_the_last(client, fixtures_dir):
    """No step: the last step, as on the page; a filter nothing passes gives a header-only CSV."""
    rows = get_csv(client, f"run={RUN}")
    assert {r["step"] for r in rows} == {"25"}
    r = client.get(f"/export?run={RUN}&reward_min=100")
    assert r.status_code == 200 and r.data.decode().count("\n") == 1


@pytest.mark.parametrize(
    "query, status, text",
    [
        ("run=nope", 404, "unknown run 'nope'"),
        ("run=..%2F..%2Fetc", 404, "unknown run"),
        ("", 400, "missing parameter run="),
        (f"run={RUN}&step=x", 400, "bad parameter step='x'"),
        (f"run={RUN}&reward_min=abc", 400, "bad parameter reward_min='abc': not a number."),
        (f"run={RUN}&q=(", 400, "invalid regular expression '(': unclosed group."),
        (f"run={RUN}&format=xml", 400, "bad parameter format='xml'"),
        (f"run={RUN}&sort=prompt", 400, "bad parameter sort='prompt'"),
        (f"run={RUN}&rewardmin=1", 400, "unknown parameter 'rewardmin'"),
    ],
)
def test_export105_bad_requests(client, fixtures_dir, query, status, text):
    """Unknown run -> 404, any bad parameter -> 400, each with a short plain-text reason."""
    r = client.get("/export?" + query)
    assert r.status_code == status
    assert r.mimetype == "text/plain" and text in r.data.decode()


def test_export106_many_rows_spill_in_rank_buckets(client, fixtures_dir, monkeypatch):
    """An export bigger than one batch goes through the rank buckets on disk: same bytes as in one go."""
    import data.export as export

    query = f"/export?run={RUN}&step=all&sort=kl_mean&order=desc&format=jsonl"
    whole = client.get(query).data  # 400 rows <= BATCH: one batch, texts fetched directly
    monkeypatch.setattr(export, "BATCH", 64)
    monkeypatch.setattr(export, "SPILL_ROWS", 150)
    spilled = client.get(query).data
    assert spilled == whole and len(whole.splitlines()) == 400


# Cells a spreadsheet would run (OWASP's list: = + - @ TAB CR) in every place a text reaches the CSV.
FORMULAS = ('=HYPERLINK("http://x")', "+1+2", "-2+3", "@SUM(A1)", "\tTAB", "\rCR")


def formula_run(root):
    """A run whose prompts, responses, extra values and an extra field's name start like formulas, beside
    negative numbers (a negative reward, an extra number, a too-large negative integer kept as digits)."""
    run = root / "formulas"
    run.mkdir(parents=True)
    lines = [
        {
            "prompt": f,
            "response": FORMULAS[-1 - i],
            "reward": -0.5 - i,
            "step": 1,
            "note": f,
            "=cmd": "x",
            "delta": -3,
            "seed": -123456789012345678901234567890,
        }
        for i, f in enumerate(FORMULAS)
    ]
    (run / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def check_formula_csv(text: str) -> None:
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(rows) == len(FORMULAS)
    assert "'=cmd" in rows[0] and "=cmd" not in rows[0]
    assert sorted(r["prompt"] for r in rows) == sorted("'" + f for f in FORMULAS)
    assert sorted(r["response"] for r in rows) == sorted("'" + f for f in FORMULAS)
    assert sorted(r["note"] for r in rows) == sorted("'" + f for f in FORMULAS)
    # Numbers stay numbers: a spreadsheet reads them as such, and no formula starts with them.
    assert sorted(float(r["reward"]) for r in rows) == sorted(-0.5 - i for i in range(len(FORMULAS)))
    assert {r["delta"] for r in rows} == {"-3"}
    assert {r["seed"] for r in rows} == {"-123456789012345678901234567890"}
    assert {r["'=cmd"] for r in rows} == {"x"}
    for r in rows:
        for value in r.values():
            assert not value.startswith(("=", "+", "@", "\t", "\r")), value
            assert not value.startswith("-") or value.lstrip("-").replace(".", "").isdigit(), value


def test_export107_csv_cells_never_start_a_formula(client, board_root, tmp_path):
    """/export?format=csv prefixes a single quote to text cells and column names starting with = + - @ TAB
    or CR (OWASP), and leaves negative numbers as numbers; JSON lines keep the texts as they are."""
    formula_run(tmp_path / "root")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    r = client.get("/export?run=formulas&step=all&format=csv")
    assert r.status_code == 200, r.data[:300]
    check_formula_csv(r.data.decode("utf-8"))
    r = client.get("/export?run=formulas&step=all&format=jsonl")
    rows = [json.loads(x) for x in r.data.decode("utf-8").splitlines()]
    assert sorted(x["prompt"] for x in rows) == sorted(FORMULAS) and "=cmd" in rows[0]
