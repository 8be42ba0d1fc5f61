"""data/trainer_logs: where a run's trainer logs are found, the TRL fixtures' log histories read key by
key, TensorBoard event files written with TensorBoard's own writer and read back, lining up with the
rollout steps, and the agreement check (passing on the fixtures, failing on a perturbed copy)."""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time

import polars as pl
import pytest

from data.ingest import ingest_run
from data.store import open_store
from data.trainer_logs import align, aligned, find_logs, read_logs, trainer_scalars
from data.trainer_logs.agreement import AGREES, DISAGREES, NOT_COMPARABLE, checks
from data.trainer_logs.read import SUMMARY_KEYS
from data.trainer_logs.scalars import wait_for_events

PADS = ("<pad>", "<|endoftext|>")


def _store(run_dir, cache):
    return open_store(ingest_run(run_dir, cache, PADS).store_dir)


def _events(folder, points, tf2: bool = False):
    """Write ``{tag: [(step, value), ...]}`` to an event file in ``folder`` with TensorBoard's own writer:
    legacy ``simple_value`` scalars (as torch.utils.tensorboard and the HF Trainer write), or TF2 scalar
    tensors with the scalars plugin's metadata."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import metadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    w = EventFileWriter(str(folder))
    for tag, series in points.items():
        for step, value in series:
            if tf2:
                v = summary_pb2.Summary.Value(
                    tag=tag,
                    tensor=tensor_util.make_tensor_proto(value),
                    metadata=metadata.create_summary_metadata(display_name=tag, description=""),
                )
            else:
                v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
            w.add_event(
                event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[v]))
            )
    w.close()


# ---- the fixtures' log histories -------------------------------------------------------------------------


def test_trainerlogs001_trl_fixtures_every_scalar_listed(fixtures_dir):
    """Every numeric key of each TRL fixture's log history is listed with all its steps; GRPO's final
    summary entry is the run summary, not a point of any curve."""
    for run, name in (
        ("trl-ppo-small", "trl_log_history.json"),
        ("trl-grpo-small", "trl_log_history.json"),
        ("trl-grpo-completions", "log_history.json"),
    ):
        entries = json.loads((fixtures_dir / run / name).read_text())
        t = trainer_scalars(fixtures_dir / run)
        assert [f.rel for f in t.files] == [name]
        per_step = [e for e in entries if not SUMMARY_KEYS & e.keys()]
        want = {k for e in per_step for k in e if k != "step"}
        assert set(t.keys()) == want, run
        assert t.frame.height == sum(len(e) - 1 for e in per_step)
        cat = t.catalog()
        assert cat.height == len(want)
        for e in per_step[:3] + per_step[-2:]:
            for k, v in e.items():
                if k != "step":
                    got = t.series(k).filter(pl.col("step") == e["step"]).item(0, "value")
                    assert got == v, (run, k, e["step"])
    grpo = trainer_scalars(fixtures_dir / "trl-grpo-small")
    last = json.loads((fixtures_dir / "trl-grpo-small" / "trl_log_history.json").read_text())[-1]
    assert grpo.summary["train_loss"] == last["train_loss"]
    assert "train_runtime" not in grpo.keys()
    # epoch at step 25 comes from the last training log (0.25), the summary entry not counted twice
    assert grpo.series("epoch").height == 25
    ppo = trainer_scalars(fixtures_dir / "trl-ppo-small")
    assert ppo.summary == {} and len(ppo.keys()) == 18


def test_trainerlogs002_agreement_passes_on_the_fixtures(fixtures_dir, tmp_path):
    """The checks the fixtures' README says hold exactly all agree on every one of the 25 steps."""
    want = {
        "trl-ppo-small": {"objective/scores", "objective/kl", "objective/non_score_reward"},
        "trl-grpo-small": {"reward", "rewards/length_diversity/mean", "kl", "frac_reward_zero_std"},
    }
    for run, keys in want.items():
        store = _store(fixtures_dir / run, tmp_path / "cache")
        got = checks(trainer_scalars(fixtures_dir / run), store.scalars(), store.steps())
        assert {c.key for c in got} == keys
        for c in got:
            assert c.status == AGREES, (run, c.key, c.max_abs_diff, c.worst_step)
            assert c.steps == 25 and c.bad == 0
            assert c.max_abs_diff < 1e-6


def _perturb(src, dst, step, change):
    """Copy run ``src`` to ``dst``, applying ``change(record)`` to the first record of ``step`` in
    rank0.jsonl."""
    shutil.copytree(src, dst)
    path = dst / "rank0.jsonl"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec["step"] == step:
            change(rec)
            lines[i] = json.dumps(rec)
            break
    path.write_text("\n".join(lines) + "\n")


def test_trainerlogs003_agreement_fails_on_a_perturbed_copy(fixtures_dir, tmp_path):
    """One reward changed at step 7 of GRPO breaks ``reward`` and ``rewards/length_diversity/mean`` there
    only; one log-prob changed at step 9 of PPO breaks ``objective/kl`` there only."""
    grpo = tmp_path / "runs" / "grpo"

    def more_reward(r):
        r["reward"] += 1.0

    _perturb(fixtures_dir / "trl-grpo-small", grpo, 7, more_reward)
    store = _store(grpo, tmp_path / "cache")
    got = {c.key: c for c in checks(trainer_scalars(grpo), store.scalars(), store.steps())}
    for key in ("reward", "rewards/length_diversity/mean"):
        assert got[key].status == DISAGREES and got[key].bad == 1 and got[key].worst_step == 7
        assert got[key].max_abs_diff == pytest.approx(1 / 16)
        bad = got[key].rows.filter(pl.col("step") == 7)
        assert bad.item(0, "diff") == pytest.approx(-1 / 16)
    assert got["kl"].status == AGREES

    ppo = tmp_path / "runs" / "ppo"

    def lower_logprob(r):
        r["logprobs"][0] -= 0.5

    _perturb(fixtures_dir / "trl-ppo-small", ppo, 9, lower_logprob)
    store = _store(ppo, tmp_path / "cache")
    got = {c.key: c for c in checks(trainer_scalars(ppo), store.scalars(), store.steps())}
    assert got["objective/kl"].status == DISAGREES and got["objective/kl"].worst_step == 9
    assert got["objective/kl"].max_abs_diff == pytest.approx(0.5 / 16, abs=1e-6)
    assert got["objective/scores"].status == AGREES


def test_trainerlogs004_not_comparable_says_why(tmp_path):
    """A check whose board quantity the rollouts lack is "not comparable" with the reason; no shared
    step is "not comparable" too; a run without logs has no checks."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    recs = [{"prompt": "p", "response": "x", "reward": float(i), "step": 1 + i // 2} for i in range(4)]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = _store(run, tmp_path / "cache")
    assert checks(trainer_scalars(run), store.scalars(), store.steps()) == []
    (run / "log_history.json").write_text(
        json.dumps(
            [
                {"reward": 0.5, "kl": 0.1, "step": 1},
                {"reward": 2.5, "kl": 0.2, "step": 2},
                {"objective/scores": 9.0, "step": 50},
            ]
        )  # fmt: skip
    )
    got = {c.key: c for c in checks(trainer_scalars(run), store.scalars(), store.steps())}
    assert got["reward"].status == AGREES and got["reward"].steps == 2
    assert got["kl"].status == NOT_COMPARABLE and "KL" in got["kl"].note
    assert got["objective/scores"].status == NOT_COMPARABLE and "No step" in got["objective/scores"].note


# ---- TensorBoard -------------------------------------------------------------------------------------------


def test_trainerlogs005_tensorboard_events_written_and_read_back(tmp_path):
    """Event files under runs/<date>_<host>/ (HF's logging_dir), legacy simple values and TF2 scalar
    tensors alike, are read back exactly, tags as written; histograms are not scalars."""
    run = tmp_path / "run"
    tb = run / "runs" / "Nov26_09-00-00_host"
    tb.mkdir(parents=True)
    _events(
        tb, {"train/loss": [(1, 0.75), (2, 0.5), (3, 0.25)], "train/learning_rate": [(1, 1e-5), (3, 2e-5)]}
    )
    tf2 = run / "tf2"
    tf2.mkdir()
    _events(tf2, {"eval/reward": [(10, 1.5), (20, 2.5)]}, tf2=True)
    files = find_logs(run)
    assert [(f.kind, f.rel) for f in files] == [
        ("tensorboard", "runs/Nov26_09-00-00_host"),
        ("tensorboard", "tf2"),
    ]
    t = read_logs(files)
    assert t.keys() == ["eval/reward", "train/learning_rate", "train/loss"]
    assert t.series("train/loss").rows() == [(1, 0.75), (2, 0.5), (3, 0.25)]
    lr = t.series("train/learning_rate").get_column("value").to_list()
    assert lr == pytest.approx([1e-5, 2e-5], rel=1e-7)  # float32 on disk
    assert t.series("eval/reward").rows() == [(10, 1.5), (20, 2.5)]
    assert set(t.frame.get_column("source")) == {"runs/Nov26_09-00-00_host", "tf2"}


def test_trainerlogs006_tensorboard_corrupt_file_is_a_note(tmp_path):
    """A truncated event file gives what was readable (or nothing) and never raises."""
    run = tmp_path / "run"
    run.mkdir()
    _events(run, {"train/loss": [(s, s / 10) for s in range(1, 6)]})
    path = next(run.glob("events.out.tfevents.*"))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])  # the last record cut mid-way
    assert trainer_scalars(run).reading == (".",)  # read in the background (see trainerlogs010)
    wait_for_events(60)
    t = trainer_scalars(run)
    assert t.series("train/loss").height == 4 and t.reading == ()


# ---- where logs are looked for ------------------------------------------------------------------------------


def test_trainerlogs007_discovery_rules(tmp_path):
    """The highest checkpoint's trainer_state.json, then the run folder's, then *log_history*.json; a
    symlink out of the run folder is not followed; events deeper than two folders are not looked for."""
    run = tmp_path / "run"
    for n, loss in ((2, 9.0), (10, 1.0)):
        (run / f"checkpoint-{n}").mkdir(parents=True)
        state = {"global_step": n, "log_history": [{"loss": loss, "step": n}]}
        (run / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps(state))
    (run / "trainer_state.json").write_text(
        json.dumps(
            {
                "log_history": [
                    {"loss": 0.5, "step": 10},
                    {"loss": float("nan"), "grad_norm": "big", "step": 11},
                ]
            }
        )
    )
    (run / "my_log_history.json").write_text(json.dumps([{"loss": 0.25, "step": 11}, {"epoch": 1.0}]))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "trainer_state.json").write_text(json.dumps({"log_history": [{"loss": 7.0, "step": 1}]}))
    os.symlink(outside, run / "checkpoint-99")
    deep = run / "a" / "b" / "c"
    deep.mkdir(parents=True)
    _events(deep, {"x": [(1, 1.0)]})
    files = find_logs(run)
    assert [(f.kind, f.rel) for f in files] == [
        ("trainer_state", "checkpoint-10/trainer_state.json"),
        ("trainer_state", "trainer_state.json"),
        ("log_history", "my_log_history.json"),
    ]
    t = read_logs(files)
    # step 10: the run folder's state wins over the checkpoint's; step 11: NaN then 0.25 from the later file
    assert t.series("loss").rows() == [(10, 0.5), (11, 0.25)]
    assert any("not numbers" in n for n in t.notes) and any("without an integer step" in n for n in t.notes)
    nan_only = read_logs(files[:2])
    assert math.isnan(nan_only.series("loss").item(1, "value"))


def test_trainerlogs008_cache_reads_again_when_a_log_changes(tmp_path):
    """A log that grows is read again; an unchanged one is answered from memory (the same object)."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "trl_log_history.json"
    path.write_text(json.dumps([{"loss": 1.0, "step": 1}]))
    first = trainer_scalars(run)
    assert trainer_scalars(run) is first
    path.write_text(json.dumps([{"loss": 1.0, "step": 1}, {"loss": 0.5, "step": 2}]))
    assert trainer_scalars(run).series("loss").height == 2


def test_trainerlogs009_alignment_with_rollout_steps(tmp_path):
    """Steps logged without rollouts and rollouts without a log are counted, in words; values are taken at
    the rollout steps only."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "log_history.json").write_text(json.dumps([{"loss": float(s), "step": s} for s in (1, 2, 3, 4)]))
    t = trainer_scalars(run)
    a = align(t, [2, 3, 4, 5, 6])
    assert (a.shared, a.trainer_only, a.rollouts_only) == ((2, 3, 4), (1,), (5, 6))
    notes = a.notes()
    assert notes == ["1 logged steps have no rollouts (1).", "2 rollout steps have no trainer log (5, 6)."]
    assert aligned(t, "loss", [6, 2, 3]).rows() == [(2, 2.0), (3, 3.0), (6, None)]
    assert align(t, [100]).notes()[0].startswith("No step of the trainer's logs")


# ---- TensorBoard events: in the background, bounded ---------------------------------------------------------


def test_trainerlogs010_tensorboard_read_in_the_background(tmp_path, monkeypatch):
    """A run's TensorBoard events are never read in the request that asks for its scalars: the answer comes
    at once, says they are still being read (the trainer card shows that note), and is not kept; the read
    runs on the background reader's thread, and later answers hold every point (then kept)."""
    from data.compare.trainer import trainer_notes
    from data.trainer_logs import scalars

    run = tmp_path / "run"
    run.mkdir()
    _events(run, {"train/loss": [(s, s / 4) for s in range(1, 9)]})
    threads, release = [], threading.Event()
    real = scalars._events_now

    def held(f):  # the read waits for the test, so the answer before it is seen for sure
        threads.append(threading.current_thread().name)
        release.wait(60)
        return real(f)

    monkeypatch.setattr(scalars, "_events_now", held)
    first = trainer_scalars(run)
    assert first.reading == (".",) and first.empty
    notes = [n.text for n in trainer_notes("run", first, [1, 2])]
    assert any("still reading its TensorBoard events" in n for n in notes), notes
    assert trainer_scalars(run) is not first and trainer_scalars(run).reading == (".",)
    release.set()
    wait_for_events(60)
    assert threads == [threads[0]] and threads[0].startswith("tensorboard")
    done = trainer_scalars(run)
    assert done.reading == () and done.series("train/loss").rows() == [(s, s / 4) for s in range(1, 9)]
    assert trainer_scalars(run) is done


def test_trainerlogs011_tensorboard_points_capped_by_a_setting(tmp_path, monkeypatch):
    """No more scalar points are read than RLBOARD_MAX_TENSORBOARD_POINTS; the note names the setting and
    the points kept are the first ones written."""
    run = tmp_path / "run"
    run.mkdir()
    _events(run, {"a": [(s, float(s)) for s in range(10)], "b": [(s, -float(s)) for s in range(10)]})
    monkeypatch.setenv("RLBOARD_MAX_TENSORBOARD_POINTS", "13")
    t = read_logs(find_logs(run))
    assert t.frame.height == 13
    assert t.series("a").height == 10 and t.series("b").rows() == [(0, 0.0), (1, -1.0), (2, -2.0)]
    assert any("13 scalar points" in n and "RLBOARD_MAX_TENSORBOARD_POINTS" in n for n in t.notes), t.notes


def test_trainerlogs012_checksums_as_tensorboard_computes_them():
    """The checksums computed many records at once equal TensorBoard's own ``masked_crc32c``
    (tensorboard/compat/tensorflow_stub/pywrap_tensorflow.py, ``masked_crc32c``, which
    ``PyRecordReader_New.GetNext`` checks each record's length and data against)."""
    import numpy as np
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_crc

    from data.trainer_logs.events import masked_crc32c

    rng = np.random.default_rng(7)
    for length in (0, 1, 8, 37, 300):
        rows = rng.integers(0, 256, size=(5, length), dtype=np.uint8)
        assert masked_crc32c(rows).tolist() == [tb_crc(r.tobytes()) for r in rows]
    assert tb_crc(b"123456789") == masked_crc32c(np.frombuffer(b"123456789", np.uint8).reshape(1, 9))[0]


def test_trainerlogs013_damaged_and_oversized_records(tmp_path, monkeypatch):
    """A record whose bytes fail their checksum ends the file's reading there (the points before it kept,
    a note says so); a record too long to be a scalar (an image, a graph) is passed over unread."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from data.trainer_logs import events

    run = tmp_path / "run"
    run.mkdir()
    w = EventFileWriter(str(run))
    for step in range(6):
        v = summary_pb2.Summary.Value(tag="loss", simple_value=step / 2)
        w.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[v])))
        if step == 2:  # a big non-scalar record between the scalars
            img = summary_pb2.Summary.Image(encoded_image_string=b"x" * 5000)
            big = summary_pb2.Summary.Value(tag="img", image=img)
            w.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[big])))
    w.close()
    monkeypatch.setattr(events, "MAX_SCALAR_RECORD", 1000)
    t = read_logs(find_logs(run))
    assert t.series("loss").rows() == [(s, s / 2) for s in range(6)] and t.keys() == ["loss"]
    assert t.notes == ()
    path = next(run.glob("events.out.tfevents.*"))
    data = bytearray(path.read_bytes())
    at = data.rindex(b"loss") - 1  # inside the last record's data
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    t = read_logs(find_logs(run))
    assert t.series("loss").rows() == [(s, s / 2) for s in range(5)]
    assert any("damaged" in n and "checksum" in n for n in t.notes), t.notes


def test_trainerlogs014_merge_keeps_the_last_of_each_key_and_step():
    """Of two logs giving the same key at the same step the later in merge order wins (and within one log
    its later entry), lists and TensorBoard frames alike; the frame is sorted by key then step."""
    from data.trainer_logs.read import Rows
    from data.trainer_logs.scalars import merge

    a = Rows(keys=["loss", "loss", "kl", "loss"], steps=[2, 1, 1, 2], values=[0.5, 0.9, 0.1, 0.4])
    b = Rows(frame=pl.DataFrame({"key": ["loss", "lr"], "step": [1, 1], "value": [0.8, 1e-5]}))
    got = merge([("trainer_state.json", a), ("runs", b)])
    assert got.rows() == [
        ("kl", 1, 0.1, "trainer_state.json"),
        ("loss", 1, 0.8, "runs"),
        ("loss", 2, 0.4, "trainer_state.json"),
        ("lr", 1, 1e-5, "runs"),
    ]
