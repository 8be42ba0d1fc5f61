"""The shared results cache: a second process (as a second gunicorn worker) reads what the first computed,
keyed on the store version; a new commit misses it; the cache is bounded and may be unavailable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from data import cache
from data.ingest import ingest_run

REPO = Path(__file__).resolve().parents[2]
PADS = ("<pad>",)

# Run in a fresh interpreter: the prompt table of the store at argv[1]; with argv[2] == "read-only", the
# computation itself raises, so only a result another process stored can answer.
WORKER = """
import sys
from data import prompts
from data.derived import prompts as prompt_summary
from data.store import open_store
if sys.argv[2] == "read-only":
    def computing(*a, **k):
        raise AssertionError("computed, not read from the shared cache")
    prompt_summary.prompt_list = prompt_summary.read_prompt_list = computing
from pathlib import Path
table = prompts.prompt_table(open_store(Path(sys.argv[1])))
print(table.sort("prompt_key").select("prompt_key", "n_responses", "win_rate").write_json())
"""


def _run(tmp_path, rewards):
    run = tmp_path / "runs" / "run"
    run.mkdir(parents=True, exist_ok=True)
    rows = [
        {"prompt": f"p{i % 3}", "response": f"r{i}", "reward": r, "ref_reward": 0.5, "step": 1 + i // 4}
        for i, r in enumerate(rewards)
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ingest_run(run, tmp_path / "cache", PADS).store_dir


def _worker(store_dir: Path, mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(store_dir), mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_cache001_a_second_process_reads_what_the_first_computed(tmp_path):
    """One process computes the prompt table and stores it; another, unable to compute it, reads the same
    table; after a new commit (another store version) that process misses and fails to compute."""
    store_dir = _run(tmp_path, [0.0, 1.0, 0.5, 1.0, 0.0, 1.0])
    first = _worker(store_dir, "compute")
    assert _worker(store_dir, "read-only") == first
    assert (tmp_path / "cache" / cache.RESULTS).is_dir()  # beside the stores, in the cache folder
    _run(tmp_path, [0.0, 1.0, 0.5, 1.0, 0.0, 1.0, 1.0, 1.0])  # the file grew: a new version
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(store_dir), "read-only"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode != 0 and "computed, not read from the shared cache" in done.stderr


def test_cache002_bounded_and_optional(tmp_path):
    """The results cache has a size limit; where it cannot be opened (its folder is a file), results are
    computed all the same."""
    from data import prompts
    from data.store import open_store

    disk = cache.results(tmp_path)
    assert disk is not None and disk.size_limit == cache.RESULTS_BYTES
    store_dir = _run(tmp_path / "blocked", [0.0, 1.0, 1.0])
    (store_dir.parent / cache.RESULTS).write_text("not a folder")
    assert cache.results(store_dir.parent) is None
    table = prompts.prompt_table(open_store(store_dir))
    assert sorted(table.get_column("n_responses").to_list()) == [1, 1, 1]


def test_cache003_a_store_key_argument_is_stored_as_its_name(tmp_path):
    """A StoreKey among a cached function's arguments goes into the results cache's key as the tuple that
    names the store's state (folder, version, commit time), never with its store; a StoreKey of the same
    state opened again finds the entry, one of another state misses it."""
    import pickle

    from data.store import open_store

    a = _run(tmp_path / "a", [0.0, 1.0, 0.5])
    b = _run(tmp_path / "b", [1.0, 1.0])
    key = cache.StoreKey(open_store(b))
    assert pickle.loads(pickle.dumps(key)) == key.key
    assert len(pickle.dumps(key)) < 400
    calls: list = []

    @cache.shared(0)
    def pair_of(k, other):
        calls.append(other)
        return 1

    pair_of(cache.StoreKey(open_store(a)), key)
    pair_of(cache.StoreKey(open_store(a)), cache.StoreKey(open_store(b)))
    assert len(calls) == 1
    _run(tmp_path / "b", [1.0, 1.0, 0.0, 1.0, 1.0])  # b's next commit: another state
    pair_of(cache.StoreKey(open_store(a)), cache.StoreKey(open_store(b)))
    assert len(calls) == 2


def test_cache004_new_code_misses_what_old_code_computed(tmp_path, monkeypatch):
    """A board updated to new code (another digest of data/'s source) computes again what the old one
    kept, though the store and its format are the same; the same code finds its entry."""
    from data import prompts
    from data.store import open_store

    store = open_store(_run(tmp_path, [0.0, 1.0, 0.5, 1.0]))
    calls: list = []

    @cache.shared(0)
    def counted(key: cache.StoreKey) -> int:
        calls.append(1)
        return prompts.prompt_table(key.store).height

    key = cache.StoreKey(store)
    assert len(cache.code_version()) == 16 and int(cache.code_version(), 16) >= 0
    assert counted(key) == 3 and counted(key) == 3 and len(calls) == 1  # the second read from the disk cache
    monkeypatch.setattr(cache, "code_version", lambda: "another-version")
    assert counted(key) == 3 and len(calls) == 2
