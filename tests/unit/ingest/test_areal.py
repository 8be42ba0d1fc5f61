"""AReaL's rollout dumps laid out as AReaL writes them, read back row by row against the files read here
independently (json), not through the board.

The writer: inclusionAI/AReaL, ``areal/infra/workflow_executor.py`` (commit 4aef98d8), ``_get_dump_dir``
(lines 818-832: ``{log_path}/rollout`` or ``{log_path}/eval-rollout``) and ``_dump_trajectory`` (lines
834-921): ``tail_version = max(versions)`` (876), the folder ``os.path.join(dump_dir, str(tail_version))``
(879), the file ``f"{task_id}.jsonl"`` opened with "a" (885-886), one record per sample with
``task_id, sample_idx, seqlen, prompt_len, head_version, tail_version, reward, prompt, completion`` in
that order (909-919), written as ``json.dumps(record) + "\\n"`` (920); a sample whose last position is
not a completion token is skipped (894-895), so ``seqlen > prompt_len`` on every line."""

from __future__ import annotations

import json
from pathlib import Path

from data.ingest import ingest_run
from data.schema.dialects import detect
from data.store import open_store
from data.store.runs import scan_root

PROMPT = "<|im_start|>user\nSolve: {a} + {b} = ?<|im_end|>\n<|im_start|>assistant\n"


def _dump_trajectory(dump_dir: Path, task_id: int, versions: list[int], samples: list[tuple]) -> None:
    """What ``_dump_trajectory`` writes for one task: ``samples`` as (prompt ids count, completion ids
    count, reward, prompt text, completion text), ``versions`` the policy versions of its tokens."""
    tail_version, head_version = max(versions), min(versions)
    version_dir = dump_dir / str(tail_version)
    version_dir.mkdir(parents=True, exist_ok=True)
    with open(version_dir / f"{task_id}.jsonl", "a") as f:
        for i, (n_prompt, n_completion, reward, prompt_text, completion_text) in enumerate(samples):
            record = {
                "task_id": task_id,
                "sample_idx": i,
                "seqlen": n_prompt + n_completion,
                "prompt_len": n_prompt,
                "head_version": head_version,
                "tail_version": tail_version,
                "reward": float(reward),
                "prompt": prompt_text,
                "completion": completion_text,
            }
            f.write(json.dumps(record) + "\n")


def write_areal_run(log_path: Path) -> int:
    """30 tasks of 2 samples over versions 0-2 (60 lines, as the issue's dump), task ids counting on
    across versions as AReaL submits them, a few tasks finished one version after they started; and an
    evaluation of 3 tasks. Returns the number of training lines."""
    lines = 0
    for task_id in range(30):
        tail = task_id // 10
        head = max(0, tail - (task_id % 3 == 0))
        a, b = task_id, task_id + 7
        samples = [
            (
                20 + task_id,
                5 + k + task_id % 4,
                1.0 if k == 0 else 0.0,
                PROMPT.format(a=a, b=b),
                f"<think>{a}+{b}</think> {a + b + k}<|im_end|>",
            )
            for k in range(2)
        ]
        _dump_trajectory(log_path / "rollout", task_id, [head, tail], samples)
        lines += len(samples)
    for task_id in (100, 101, 102):
        _dump_trajectory(
            log_path / "eval-rollout", task_id, [2], [(9, 4, 1.0, "<|im_start|>q", "a<|im_end|>")]
        )
    return lines


def _sources(log_path: Path, top: str) -> dict[tuple[str, int], tuple[dict, int]]:
    """Every line of the dumps under ``top``, by (path inside the run, line), with its version folder."""
    out = {}
    for path in sorted((log_path / top).glob("*/*.jsonl")):
        for n, text in enumerate(path.read_text().splitlines(), start=1):
            out[(path.relative_to(log_path).as_posix(), n)] = (json.loads(text), int(path.parent.name))
    return out


def test_areal001_every_row_on_its_version_step(tmp_path):
    """60 AReaL lines: every row's prompt, response (the completion), reward, step (the version folder,
    = tail_version; before, the task id of the file name: 58 of 60 wrong), group (the task), response
    length (seqlen - prompt_len) as in the file; read as AReaL "sure"; the evaluation apart."""
    log_path = tmp_path / "root" / "areal-run"
    n = write_areal_run(log_path)
    scan = scan_root(tmp_path / "root")
    assert set(scan.runs) == {"areal-run", "areal-run (validation)"}
    res = ingest_run(log_path, tmp_path / "cache", ())
    store = open_store(res.store_dir)
    assert (res.bad_lines, res.samples) == (0, n)
    entry = store.manifest.files["rollout/1/13.jsonl"]
    assert (entry["dialect"], entry["matched"], entry["step"]) == ("areal", "sure", 1)
    rows = {(r["source"], r["line"]): r for r in store.scan_parts().collect().iter_rows(named=True)}
    want = _sources(log_path, "rollout")
    assert set(rows) == set(want) and len(want) == 60
    wrong_before = 0
    for key, (src, folder) in want.items():
        got = rows[key]
        assert folder == src["tail_version"]
        assert (got["prompt"], got["response"], got["reward"]) == (
            src["prompt"],
            src["completion"],
            src["reward"],
        )
        assert got["step"] == folder
        assert got["group_id"] == src["task_id"]
        assert got["response_length"] == src["seqlen"] - src["prompt_len"]
        assert (got["head_version"], got["tail_version"]) == (src["head_version"], src["tail_version"])
        wrong_before += src["task_id"] != folder
    assert wrong_before == 58
    steps = store.steps()
    assert dict(zip(steps["step"].to_list(), steps["n"].to_list(), strict=True)) == {0: 20, 1: 20, 2: 20}

    vres = ingest_run(log_path, tmp_path / "cache", (), split="validation")
    vrows = open_store(vres.store_dir).scan_parts().collect()
    assert vres.samples == 3 and set(vrows["step"].to_list()) == {2}
    assert set(vrows["source"].to_list()) == {f"eval-rollout/2/{t}.jsonl" for t in (100, 101, 102)}


def test_areal002_recognised_by_its_own_fields_or_layout():
    """The version fields make it AReaL for sure anywhere; the sample fields only in AReaL's layout;
    prompt + completion alone stay a guess (they are verifiers' names too)."""
    own = frozenset(
        {
            "task_id",
            "sample_idx",
            "seqlen",
            "prompt_len",
            "head_version",
            "tail_version",
            "reward",
            "prompt",
            "completion",
        }
    )
    assert (detect("x/13.jsonl", own).dialect.name, detect("x/13.jsonl", own).how) == ("areal", "sure")
    sample = own - {"head_version", "tail_version"}
    assert detect("rollout/3/13.jsonl", sample).dialect.name == "areal"
    assert detect("dump/13.jsonl", sample).how == "guessed"
