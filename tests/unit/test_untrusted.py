"""The rollout root as untrusted input: links that loop, lead out or double a file, FIFOs and devices,
settings and trainer logs that are endless, huge, deeply nested or out of range (issue 33, rows 1, 3, 8, 12)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from data import untrusted
from data.config import SettingsError, parse_reward_weights
from data.ingest.options import RUN_FILE, load_options
from data.store.runs import run_file_stats, scan_root
from data.trainer_logs.read import read_history


def _lines(step: int, n: int) -> str:
    return "".join(
        json.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": float(i), "step": step}) + "\n"
        for i in range(n)
    )


@pytest.fixture
def root(tmp_path):
    """A root with one good run of two files (rank0: steps 1, rank1: steps 2)."""
    run = tmp_path / "root" / "good"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_text(_lines(1, 3))
    (run / "rank1.jsonl").write_text(_lines(2, 3))
    return tmp_path / "root"


def _in_time(fn, seconds: float = 10.0):
    """``fn()`` in a thread; fails the test (instead of hanging it) when it does not return in time."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} still running after {seconds} s (blocked on a FIFO or an endless file?)"
    return out[0]


def test_untrusted001_symlink_loops_are_skipped_and_said(root):
    """Loops in a run folder and at the root: the scan never raises (before: RuntimeError from
    Path.resolve, /healthz 500), the good files are all the run's, and each loop is named with its reason."""
    (root / "good" / "self").symlink_to("self")
    (root / "good" / "a").symlink_to("b")
    (root / "good" / "b").symlink_to("a")
    (root / "loop").symlink_to("loop")
    scan = scan_root(root)
    assert set(scan.runs) == {"good"}
    assert scan.skipped == {
        "loop": "a symlink loop",
        "good/a": "a symlink loop",
        "good/b": "a symlink loop",
        "good/self": "a symlink loop",
    }
    assert [rel for rel, _ in run_file_stats(root / "good")] == ["rank0.jsonl", "rank1.jsonl"]


def test_untrusted002_fifos_devices_and_links_out_are_skipped(root, tmp_path):
    """A FIFO named like a rollout file, a link to a device and a link out of the run folder are not
    read, and said; the scan does not block on the FIFO."""
    os.mkfifo(root / "good" / "rank9.jsonl")
    (root / "good" / "zero.jsonl").symlink_to("/dev/zero")
    (tmp_path / "secret.jsonl").write_text(_lines(1, 1))
    (root / "good" / "leak.jsonl").symlink_to(tmp_path / "secret.jsonl")
    scan = _in_time(lambda: scan_root(root))
    assert scan.skipped["good/rank9.jsonl"] == "a FIFO"
    assert scan.skipped["good/zero.jsonl"].startswith("a link out of good/")
    assert scan.skipped["good/leak.jsonl"] == f"a link out of good/ (to {tmp_path / 'secret.jsonl'})"
    assert [rel for rel, _ in run_file_stats(root / "good")] == ["rank0.jsonl", "rank1.jsonl"]


def test_untrusted003_one_file_by_two_names_is_read_once(root):
    """A link to a file of the run (``latest.jsonl -> rank0.jsonl``) or to a folder already walked
    (``again -> .``) would count its rows twice (before: silently); it is skipped and said instead."""
    (root / "good" / "latest.jsonl").symlink_to("rank0.jsonl")
    (root / "good" / "again").symlink_to(".")
    scan = scan_root(root)
    assert scan.skipped == {
        "good/latest.jsonl": "the same file as rank0.jsonl",
        "good/again": "a second way to a folder already read",
    }
    assert [rel for rel, _ in run_file_stats(root / "good")] == ["rank0.jsonl", "rank1.jsonl"]


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda p: p.symlink_to("/dev/zero"), "rlboard.toml: not read: rlboard.toml is a link out of good/"),
        (lambda p: os.mkfifo(p), "rlboard.toml: not read: rlboard.toml is a FIFO"),
        (
            lambda p: p.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n"),
            "rlboard.toml: not read: rlboard.toml nests deeper than 64 levels",
        ),
        (
            lambda p: p.write_text("# " + "x" * untrusted.SETTINGS_BYTES + "\n"),
            "rlboard.toml: not read: rlboard.toml is 1,048,579 bytes, over the limit of 1,048,576",
        ),
        (lambda p: p.symlink_to("nowhere"), "rlboard.toml: not read: rlboard.toml is a link to nothing"),
    ],
    ids=["dev-zero", "fifo", "deep", "huge", "dangling"],
)
def test_untrusted004_run_file_is_read_bounded(root, make, said):
    """rlboard.toml linked to /dev/zero (before: read without end), a FIFO (before: the run hung forever),
    100k levels deep (before: the run stopped), over 1 MiB, dangling: refused with the reason, on the runs
    page's problems; the run reads on with the defaults."""
    make(root / "good" / RUN_FILE)
    opts = _in_time(lambda: load_options(root / "good"))
    assert any(p.startswith(said) for p in opts.problems), opts.problems
    assert opts.dialect is None and opts.reading.reward_weights is None


def test_untrusted005_reward_weights_must_be_finite(root):
    """Infinite, NaN or absurd weights (before: accepted, every reward NaN or inf) are refused and said,
    in rlboard.toml and in RLBOARD_REWARD_WEIGHTS; the finite ones are kept."""
    (root / "good" / RUN_FILE).write_text(
        "[reward_weights]\nacc = inf\nfmt = nan\nbig = 1e40\nok = 0.5\n", encoding="utf-8"
    )
    opts = load_options(root / "good")
    assert opts.reading.reward_weights == {"ok": 0.5}
    bad = [p for p in opts.problems if "not a finite number" in p]
    assert len(bad) == 3 and any("'acc' is inf" in p for p in bad), opts.problems
    for text in ("acc=nan", "acc=inf,fmt=1", "acc=-1e40"):
        with pytest.raises(SettingsError, match="not a finite number"):
            parse_reward_weights(text)
    assert parse_reward_weights("acc=1,fmt=-0.5") == (("acc", 1.0), ("fmt", -0.5))


def test_untrusted006_trainer_logs_are_read_bounded(root, tmp_path):
    """A log history 100k levels deep (before: the trainer card answered 400) and a step of 2^63 (before:
    an overflow downstream) are notes; the good entries are kept. TRL's reward-function names are never
    read from a log linked out of the run folder (before: read from any JSON file it pointed at)."""
    deep = root / "good" / "trl_log_history.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    rows = read_history(deep, "trl_log_history.json")
    assert rows.steps == [] and "nests deeper than 64 levels" in rows.notes[0]
    deep.write_text(json.dumps([{"step": 2**63, "loss": 1.0}, {"step": 3, "loss": 0.5}]))
    rows = read_history(deep, "trl_log_history.json")
    assert rows.steps == [3] and rows.values == [0.5] and "beyond ±2^62" in rows.notes[0]
    outside = tmp_path / "elsewhere.json"
    outside.write_text(
        json.dumps({"log_history": [{"step": 1, "reward": 1.0, "rewards/secret_fn/mean": 1.0}]})
    )
    (root / "good" / "trainer_state.json").symlink_to(outside)
    assert load_options(root / "good").reading.reward_parts is None


def test_untrusted007_read_bounded_takes_only_regular_files_inside(tmp_path):
    """The one reader of small files: a regular file within the limit is read whole; a larger one, a
    device, a link out of the given root are refused; a missing file is FileNotFoundError."""
    f = tmp_path / "f.json"
    f.write_bytes(b"x" * 10)
    assert untrusted.read_bounded(f, 10, root=tmp_path) == b"x" * 10
    with pytest.raises(untrusted.Refused, match="over the limit of 9"):
        untrusted.read_bounded(f, 9)
    with pytest.raises(untrusted.Refused, match="a character device"):
        untrusted.read_bounded("/dev/zero", 10)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "link").symlink_to(f)
    with pytest.raises(untrusted.Refused, match="a link out of sub/"):
        untrusted.read_bounded(sub / "link", 10, root=sub)
    with pytest.raises(FileNotFoundError):
        untrusted.read_bounded(sub / "absent", 10, root=sub)
    assert untrusted.nesting_depth(b'{"a": [1, {"b": [2]}]}') == 4
    assert untrusted.nesting_depth(b"[" * 1000, limit=64) == 65


def test_untrusted008_a_malformed_tokenizer_is_said(root):
    """A tokenizer.json that is not one (before: ignored without a word, the token ids shown as if no
    tokenizer had been named) is a problem on the runs page, naming why."""
    (root / "good" / "tokenizer.json").write_text('{"model": {"type": "nothing"}}')
    (root / "good" / RUN_FILE).write_text('tokenizer = "tokenizer.json"\n')
    opts = load_options(root / "good")
    assert opts.reading.tokenizer is None
    (said,) = opts.problems
    assert said.startswith("rlboard.toml: tokenizer 'tokenizer.json' cannot be read (") and said.endswith(
        "; token ids are shown"
    ), said
