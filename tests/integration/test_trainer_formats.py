"""Runs served as trainers lay them out (AReaL) and in a format no dialect knows, read by rlboard.toml's
[fields]: every row's prompt, response, reward, step and group, exported by the server, against the files
read here independently (json); the runs page shows each run's mapping as a ready rlboard.toml."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from data.store.reading import mapping_shown, page_notices
from tests.conftest import router_body
from tests.unit.ingest.test_areal import write_areal_run

FIELDS_BY_KEY = """
[fields]
prompt = "query.text"
response = "answer"
reward = "score.total"
step = "meta.iter"
group = "example_id"
"""
FIELDS_BY_FOLDER = """
[fields]
prompt = "turns.0.content"
response = "turns.1.content"
reward = "judge.score"
step = "folder"
group = "uid"
"""


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _unknown_by_key(run: Path) -> None:
    """Two rank files, steps 0-2 in meta.iter, 2 examples of 2 samples a step; a step field of its own."""
    for rank in range(2):
        rows = [
            {"query": {"text": f"q{ex}", "lang": "en"}, "answer": f"a{it}{ex}{rank}", "score": {"total": it + ex / 4},
             "meta": {"iter": it}, "example_id": f"ex{ex}", "step": 100 + it}
            for it in range(3) for ex in range(2)
        ]  # fmt: skip
        _write(run / f"rank{rank}.jsonl", rows)
    (run / "rlboard.toml").write_text(FIELDS_BY_KEY)


def _unknown_by_folder(run: Path) -> None:
    """Steps as folders (iter_3/, iter_10/), no step in the lines, and one file in the run folder itself."""
    for it in (3, 10):
        rows = [
            {"turns": [{"content": f"p{u % 2}"}, {"content": f"r{it}-{u}"}], "judge": {"score": u / 2}, "uid": u % 2}
            for u in range(4)
        ]  # fmt: skip
        _write(run / f"iter_{it}" / "out.jsonl", rows)
    _write(
        run / "loose.jsonl",
        [{"turns": [{"content": "p"}, {"content": "r"}], "judge": {"score": 1}, "uid": 9}],
    )
    (run / "rlboard.toml").write_text(FIELDS_BY_FOLDER)


def _exported(client, run: str) -> dict[tuple[str, int], dict]:
    r = client.get(f"/export?run={run}&step=all&format=jsonl")
    assert r.status_code == 200, r.data[:300]
    return {(d["source"], d["line"]): d for d in map(json.loads, r.data.decode().splitlines())}


def _source_lines(run: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for path in sorted(run.rglob("*.jsonl")):
        for n, text in enumerate(path.read_text().splitlines(), start=1):
            out[(path.relative_to(run).as_posix(), n)] = json.loads(text)
    return out


def test_formats001_areal_and_unknown_formats_row_by_row(tmp_path, board_root, client):
    """AReaL's dump (step = version folder, group = task) and two unknown formats with [fields] (step from a
    field, and from the folder: a file in the run folder itself is step 0, said on every page); a
    root-level [fields] reads a run no dialect is sure of and leaves the AReaL run alone."""
    root = tmp_path / "root"
    write_areal_run(root / "areal")
    _unknown_by_key(root / "by-key")
    _unknown_by_folder(root / "by-folder")
    _write(root / "rooted" / "data.jsonl", [{"instruction": "i", "output": "o", "grade": 0.25, "epoch": 2}])
    (root / "rlboard.toml").write_text(
        '[fields]\nprompt = "instruction"\nresponse = "output"\nreward = "grade"\nstep = "epoch"\n'
    )
    b = board_root(root, cache_dir=tmp_path / "cache")
    stores = {run: b.store(run, wait=60) for run in ("areal", "by-key", "by-folder", "rooted")}

    got = _exported(client, "areal")
    want = {k: v for k, v in _source_lines(root / "areal").items() if k[0].startswith("rollout/")}
    assert set(got) == set(want) and len(want) == 60
    for key, src in want.items():
        row = got[key]
        folder = int(key[0].split("/")[1])
        assert (row["prompt"], row["response"], row["reward"]) == (
            src["prompt"],
            src["completion"],
            src["reward"],
        )
        assert (row["step"], row["group_id"]) == (folder, src["task_id"])
    assert stores["areal"].manifest.files["rollout/0/5.jsonl"]["matched"] == "sure"

    got = _exported(client, "by-key")
    want = _source_lines(root / "by-key")
    assert set(got) == set(want) and len(want) == 12
    for key, src in want.items():
        row = got[key]
        assert (row["prompt"], row["response"], row["reward"]) == (
            src["query"]["text"], src["answer"], src["score"]["total"]
        )  # fmt: skip
        assert (row["step"], row["group_id"], row["extra_step"]) == (
            src["meta"]["iter"],
            src["example_id"],
            src["step"],
        )
        assert row["query.lang"] == "en"

    got = _exported(client, "by-folder")
    want = _source_lines(root / "by-folder")
    assert set(got) == set(want) and len(want) == 9
    for (rel, n), src in want.items():
        row = got[(rel, n)]
        step = int(rel.split("/")[0].removeprefix("iter_")) if "/" in rel else 0
        assert (row["prompt"], row["response"], row["reward"]) == (
            src["turns"][0]["content"], src["turns"][1]["content"], src["judge"]["score"]
        )  # fmt: skip
        assert (row["step"], row["group_id"]) == (step, src["uid"])
    assert any("No step in loose.jsonl (the step that [fields] names is not in its path)" in n
               for n in page_notices(stores["by-folder"]))  # fmt: skip

    got = _exported(client, "rooted")
    assert [(r["prompt"], r["response"], r["reward"], r["step"]) for r in got.values()] == [
        ("i", "o", 0.25, 2)
    ]
    assert stores["rooted"].manifest.files["data.jsonl"]["matched"] == "mapped"

    # The runs page: each run's mapping as a ready rlboard.toml, and what it could not map.
    shown = mapping_shown(stores["by-key"])
    assert tomllib.loads(shown.toml)["fields"] == tomllib.loads(FIELDS_BY_KEY)["fields"]
    assert tomllib.loads(mapping_shown(stores["areal"]).toml)["fields"] == {
        "prompt": "prompt", "response": "completion", "reward": "reward", "step": "folder", "group": "task_id"
    }  # fmt: skip
    assert "group: none named" in " ".join(mapping_shown(stores["rooted"]).unmapped)
    page = json.dumps(client.post("/_dash-update-component", json=router_body("/", "")).get_json())
    assert "runs-mapping-by-key" in page and 'prompt = \\"query.text\\"' in page


def test_formats002_bad_mapping_said_never_a_crash(tmp_path, board_root, client):
    """A regex that does not compile and a path no record has: the runs page says both; the lines that lack
    the path are unusable lines naming the mapping; the server answers."""
    root = tmp_path / "root"
    run = root / "bad"
    _write(
        run / "a.jsonl", [{"q": "x", "a": "y", "r": 1.0, "s": 1}, {"q": "x2", "a": "y2", "r": 0.0, "s": 2}]
    )
    (run / "rlboard.toml").write_text(
        '[fields]\nprompt = "question"\nresponse = "a"\nreward = "r"\nstep = "(s"\n'
    )
    b = board_root(root, cache_dir=tmp_path / "cache")
    store = b.store("bad", wait=60)
    assert store is not None
    reasons = {r["reason"] for r in store.issues().iter_rows(named=True)}
    assert reasons == {'[fields] prompt = "question": not found in this line'}
    assert any("step = '(s' is not a regex" in p for p in store.manifest.problems)
    page = json.dumps(client.post("/_dash-update-component", json=router_body("/", "")).get_json())
    assert "is not a regex" in page and client.get("/healthz").status_code == 200


def test_formats003_a_guess_is_said_on_the_pages(tmp_path, board_root, client):
    """A file read by a guess (prompt + completion: names any logger uses) and with no step anywhere: the
    reward page says both, as every page's notices do (Board.failure_notices)."""
    root = tmp_path / "root"
    _write(
        root / "guess" / "out" / "rank0.jsonl",
        [{"prompt": f"p{i}", "completion": "c", "reward": i} for i in range(3)],
    )
    b = board_root(root, cache_dir=tmp_path / "cache")
    assert b.store("guess", wait=60) is not None
    said = b.failure_notices("guess")
    assert any("read as verifiers / prime-rl results by a guess" in n for n in said)
    assert any("No step in out/rank0.jsonl (an evaluation dump)" in n for n in said)
    page = json.dumps(
        client.post("/_dash-update-component", json=router_body("/reward", "?run=guess")).get_json()
    )
    assert "by a guess" in page and "its responses are shown as step 0" in page
