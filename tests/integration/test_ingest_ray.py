"""``app.py ingest --ray``: a run's files read on a real local Ray cluster (a head without CPUs and two
worker nodes of one CPU each), against a local ingest of the same files: the same export, issues and
summary. The cluster is started once for the module and torn down even when a test fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import orjson
import polars as pl
import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.demo import write_demo_run
from data.export import export_stream
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.store import open_store
from data.store.reading import understood
from tests.waiting import wait_until

ray = pytest.importorskip("ray", reason="ray is not installed (uv sync installs it with the dev group)")

from data.ingest import distributed  # noqa: E402
from data.ingest.distributed import spread_on_ray  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN = "demo-ppo"


@pytest.fixture(scope="module")
def cluster():
    """A cluster of a head (no CPU: no task runs there) and two worker nodes of one CPU each (``.workers``),
    this process joined to it (``.address``; ``.cluster``: ray.cluster_utils.Cluster)."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    from ray.cluster_utils import Cluster

    for attempt in range(3):  # a node not up in Ray's fixed 30 s on a loaded machine: started again
        c = Cluster()
        try:
            c.add_node(num_cpus=0, include_dashboard=False)  # the head
            workers = [c.add_node(num_cpus=1) for _ in range(2)]
            c.wait_for_nodes()
            break
        except Exception:
            c.shutdown()
            if attempt == 2:
                raise
    try:
        distributed.connect(c.address)
        yield SimpleNamespace(address=c.address, cluster=c, workers=workers)
    finally:
        ray.shutdown()
        c.shutdown()


def _csv_lines(store_dir: Path) -> list[bytes]:
    """The step=all CSV export of a store (what /export sends), its lines sorted."""
    data = b"".join(export_stream(open_store(store_dir), ResponseFilter(step=None), "csv"))
    return sorted(data.splitlines())


def _both(run_dir: Path, tmp_path: Path, **kw):
    """The run ingested on the cluster (tasks of any size) and locally: ``(ray result, local result, spread)``."""
    spread = spread_on_ray(min_task_bytes=0)
    on_ray = ingest_run(run_dir, tmp_path / "ray-cache", DEFAULT_PAD_TOKENS, spread=spread, **kw)
    here = ingest_run(run_dir, tmp_path / "local-cache", DEFAULT_PAD_TOKENS, **kw)
    return on_ray, here, spread


def _same_store(on_ray, here) -> None:
    assert on_ray.summary() == here.summary()
    assert _csv_lines(on_ray.store_dir) == _csv_lines(here.store_dir)
    a, b = open_store(on_ray.store_dir), open_store(here.store_dir)
    # A pending last line's detail says how long ago its file changed, as of each ingest's own time.
    age = pl.col("detail").str.replace(r"last modified .* ago", "last modified … ago")
    assert a.issues().with_columns(age).equals(b.issues().with_columns(age))
    assert understood(a) == understood(b)
    # The counts of ended and cut responses the tasks made reach the driver's commit (its file).
    assert a.manifest.derived["ends"].name and b.manifest.derived["ends"].name
    ends = [
        pl.read_parquet(s.dir / s.manifest.derived["ends"].name).drop("part").sort("step", "n")
        for s in (a, b)
    ]
    assert ends[0].group_by("step").sum().sort("step").equals(ends[1].group_by("step").sum().sort("step"))


def test_ray001_demo_run_same_export_as_local(cluster, tmp_path):
    """The demo run's two rank files are read by tasks on both worker nodes (none on the head); the
    step=all CSV export is byte for byte a local ingest's after sorting the lines, and so are the issues
    and what the runs page says of the files. Lines appended later are read on from where the tasks
    stopped, and nothing is read again when nothing changed."""
    full = write_demo_run(tmp_path / "full", RUN, steps=14, per_step=32, ranks=2)
    run_dir = tmp_path / "root" / RUN
    run_dir.mkdir(parents=True)
    for name in ("rank0.jsonl", "rank1.jsonl"):  # the first 200 lines of each, the rest appended later
        (run_dir / name).write_bytes(b"".join((full / name).read_bytes().splitlines(keepends=True)[:200]))
    on_ray, here, spread = _both(run_dir, tmp_path, chunk_bytes=64 << 10)
    assert set(spread.nodes) == {n.node_id for n in cluster.workers}
    assert on_ray.samples == 400 and on_ray.new_rows == 400
    _same_store(on_ray, here)
    for name in ("rank0.jsonl", "rank1.jsonl"):
        (run_dir / name).write_bytes((full / name).read_bytes())
    on_ray, here, _ = _both(run_dir, tmp_path, chunk_bytes=64 << 10)
    assert (on_ray.samples, on_ray.new_rows) == (448, 48)
    _same_store(on_ray, here)
    again = ingest_run(
        run_dir, tmp_path / "ray-cache", DEFAULT_PAD_TOKENS, spread=spread_on_ray(min_task_bytes=0)
    )
    assert (again.new_rows, again.bytes_read) == (0, 0)


@pytest.mark.parametrize(
    "run",
    [
        "real-verl-gsm8k-tools",
        "trl-grpo-completions",
        "real-nemo-gym-math",
        "real-verifiers-math-python",
        "trl-ppo-small",
    ],
)
def test_ray002_trainers_files_same_export_as_local(cluster, fixtures_dir, tmp_path, run):
    """Real trainers' files (veRL, TRL's completions Parquet with its reward weights from the log history,
    NeMo Gym, verifiers, TRL PPO rank files) read on the cluster give the export, issues and reading notes
    of a local ingest."""
    _same_store(*_both(fixtures_dir / run, tmp_path)[:2])


def test_ray003_bad_lines_kept_as_issues(cluster, tmp_path):
    """Lines a task cannot use (broken JSON, not an object, no reward, an unterminated last line) are
    issues with file and line exactly as in a local ingest, and every good line is kept."""
    run_dir = write_demo_run(tmp_path / "root", RUN, steps=4, per_step=16, ranks=2)
    lines = (run_dir / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[0])
    del record["reward"]
    bad = [b'{"prompt": "p", "response": \n', b"[1, 2, 3]\n", orjson.dumps(record) + b"\n"]
    (run_dir / "rank0.jsonl").write_bytes(b"".join(lines[:5] + bad + lines[5:]) + b'{"prompt": "cut')
    on_ray, here, spread = _both(run_dir, tmp_path)
    # Read by tasks on the workers (which of them is Ray's choice: its two small tasks may take turns on one
    # node, as in a fresh clone's run; test_ray001 holds the spread over both).
    assert spread.nodes and set(spread.nodes) <= {n.node_id for n in cluster.workers}
    assert on_ray.bad_lines == 3 and on_ray.samples == 64
    _same_store(on_ray, here)
    severities = open_store(on_ray.store_dir).issues().get_column("severity").to_list()
    assert severities.count("error") == 3 and severities.count("pending") == 1


def _cli(*args, cache: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "RAY_ADDRESS"))}
    return subprocess.run(
        [sys.executable, "app.py", "ingest", *args, "--cache-dir", str(cache), "--json"],
        cwd=REPO_ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_ray004_command_line(cluster, tmp_path):
    """``app.py ingest ROOT --ray-address ADDR`` (another driver process joining the cluster) prints what a
    local ``app.py ingest ROOT`` prints of the run, and the store's export is the same."""
    address = cluster.address
    write_demo_run(tmp_path / "root", RUN, steps=6, per_step=16, ranks=2)
    on_ray = _cli(str(tmp_path / "root"), "--ray-address", address, cache=tmp_path / "ray-cache")
    here = _cli(str(tmp_path / "root"), cache=tmp_path / "local-cache")
    assert on_ray.returncode == 0, on_ray.stderr
    assert here.returncode == 0, here.stderr
    assert json.loads(on_ray.stdout) == json.loads(here.stdout)
    stores = [next(p for p in (tmp_path / c).iterdir() if p.is_dir()) for c in ("ray-cache", "local-cache")]
    assert _csv_lines(stores[0]) == _csv_lines(stores[1])


def test_ray005_without_ray_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Without the ray package, ``ingest --ray`` says in one line how to install it, exits 2 and writes
    no store."""
    import cli

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    write_demo_run(tmp_path / "root", RUN, steps=2, per_step=4)
    code = cli.main(["ingest", str(tmp_path / "root"), "--ray", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "error: --ray needs the ray package: uv sync --extra ray (or pip install 'ray>=2.40')\n"
    assert not (tmp_path / "cache").exists()


def _parts(store_root: Path) -> list[Path]:
    return [p for s in store_root.glob("*/parts") for p in s.rglob("p*.parquet")]


# Blocks bigger than the writer's small ones (data.ingest.writer.SMALL_BLOCK): a part file each, written as
# the task goes, so that a test sees a task mid-way.
BIG_CHUNK = (1 << 20) + (128 << 10)
STEPS = 16  # of the long run


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """A run of two ~9 MB rank files (about 8 parts each) and its local ingest: ``(run folder, result)``.
    The tests act once 4 of the 16 parts are written (polled every 50 ms), so a dozen are left to write
    (before: 18 MB files of 32 parts, each of whose reads on the cluster took a minute under load)."""
    root = tmp_path_factory.mktemp("long")
    run_dir = write_demo_run(root / "root", RUN, steps=STEPS, per_step=256, ranks=2)
    return run_dir, ingest_run(run_dir, root / "local-cache", DEFAULT_PAD_TOKENS, chunk_bytes=BIG_CHUNK)


# A driver in a process of its own: the run's files on the cluster in small chunks (many parts, slowly).
DRIVER = """
import sys
from pathlib import Path
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.ingest.distributed import spread_on_ray
run_dir, cache, address = sys.argv[1:]
ingest_run(Path(run_dir), Path(cache), DEFAULT_PAD_TOKENS, spread=spread_on_ray(address, 0), chunk_bytes=CHUNK)
"""


def test_ray006_driver_killed_mid_way_then_finished(cluster, long_run, tmp_path):
    """The driver killed (SIGKILL) while its tasks write parts commits nothing: the store has no manifest,
    so readers see no run; an ingest run again reads the run whole, and its export is a local ingest's."""
    run_dir, here = long_run
    cache = tmp_path / "ray-cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "RAY_ADDRESS"))}
    args = [
        sys.executable,
        "-c",
        DRIVER.replace("CHUNK", str(BIG_CHUNK)),
        str(run_dir),
        str(cache),
        cluster.address,
    ]
    child = subprocess.Popen(args, cwd=REPO_ROOT, env=env)
    try:
        wait_until(lambda: len(_parts(cache)) >= 4 or child.poll() is not None, 300, "the tasks' first parts")
        assert child.poll() is None, "the driver ended before it could be killed"
    finally:
        child.kill()
        child.wait()
    store_dir = next(cache.iterdir())
    assert not (store_dir / "manifest.json").exists()
    # The job's workers end with their driver: its tasks' CPUs are free again.
    wait_until(
        lambda: ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU"),
        120,
        "the killed driver's tasks to end",
    )
    again = ingest_run(
        run_dir, cache, DEFAULT_PAD_TOKENS, spread=spread_on_ray(min_task_bytes=0), chunk_bytes=BIG_CHUNK
    )
    assert again.new_rows == here.new_rows == STEPS * 256
    _same_store(again, here)


def test_ray007_worker_node_lost_mid_way(cluster, long_run, tmp_path):
    """A worker node lost while its task writes parts: Ray runs the task again on the other node, into
    the same part ids; the driver commits once every task is done, and the export is a local ingest's.
    (The node is added back after.)"""
    run_dir, here = long_run
    cache = tmp_path / "ray-cache"
    spread = spread_on_ray(min_task_bytes=0)
    out: dict = {}

    def ingest() -> None:
        try:
            out["result"] = ingest_run(
                run_dir, cache, DEFAULT_PAD_TOKENS, spread=spread, chunk_bytes=BIG_CHUNK
            )
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    thread = threading.Thread(target=ingest)
    thread.start()
    node = cluster.workers[0]
    try:
        wait_until(lambda: len(_parts(cache)) >= 4 or not thread.is_alive(), 300, "the tasks' first parts")
        assert thread.is_alive(), "the ingest ended before a node could be lost"
        cluster.cluster.remove_node(node, allow_graceful=False)
        thread.join(timeout=300)
        assert "error" not in out, out.get("error")
        # The other node ran tasks (the lost node may have finished one before it went, under load).
        assert any(n != node.node_id for n in spread.nodes), spread.nodes
        _same_store(out["result"], here)
    finally:
        thread.join(timeout=300)
        if node not in cluster.cluster.worker_nodes:
            cluster.workers[0] = cluster.cluster.add_node(num_cpus=1)
            cluster.cluster.wait_for_nodes()


def test_ray008_compressed_file_needing_more_part_ids(cluster, tmp_path):
    """A gzip file whose text is far more than the guessed ratio (one line repeated): its task runs out of
    part ids, is run again with more, and the store is a local ingest's all the same."""
    import gzip

    demo = write_demo_run(tmp_path / "demo", RUN, steps=2, per_step=4, ranks=1)
    line = (demo / "rank0.jsonl").read_bytes().splitlines(keepends=True)[0]
    run_dir = tmp_path / "root" / "gz"
    run_dir.mkdir(parents=True)
    (run_dir / "rank0.jsonl.gz").write_bytes(gzip.compress(line * 3000))
    (run_dir / "rank1.jsonl").write_bytes(line * 10)
    size = (run_dir / "rank0.jsonl.gz").stat().st_size
    assert len(line) * 3000 > distributed.COMPRESSION * size * 4  # more blocks than ids given
    on_ray, here, _ = _both(run_dir, tmp_path, chunk_bytes=16 << 10)
    assert on_ray.samples == 3010
    _same_store(on_ray, here)


def test_ray009_unreachable_address_one_line_and_exit_2(tmp_path, capsys):
    """An address nothing listens on is said in one line at once (Ray itself retries it for minutes),
    exit 2, no store written."""
    import cli
    from tests.conftest import free_port

    port = free_port()
    write_demo_run(tmp_path / "root", RUN, steps=2, per_step=4)
    args = [
        "ingest",
        str(tmp_path / "root"),
        "--ray-address",
        f"127.0.0.1:{port}",
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    t0 = time.monotonic()
    assert cli.main(args) == 2
    assert time.monotonic() - t0 < 10
    assert (
        capsys.readouterr().err
        == f"error: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused\n"
    )
    assert not (tmp_path / "c").exists()


def test_ray010_rewritten_file_read_again(cluster, tmp_path):
    """A rank file rewritten shorter (its first line gone) after a Ray ingest is read again from the start
    by its task (its old parts dropped by the driver): the store is a local ingest's of the same change."""
    run_dir = write_demo_run(tmp_path / "root", RUN, steps=4, per_step=16, ranks=2)
    _same_store(*_both(run_dir, tmp_path)[:2])
    lines = (run_dir / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "rank0.jsonl").write_bytes(b"".join(lines[1:]))
    on_ray, here, _ = _both(run_dir, tmp_path)
    assert (on_ray.samples, on_ray.new_rows) == (here.samples, here.new_rows) == (63, 31)
    _same_store(on_ray, here)
