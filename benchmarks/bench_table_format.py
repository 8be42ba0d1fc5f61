"""Delta Lake (deltalake) against Iceberg (pyiceberg with its SqlCatalog on sqlite, the one catalog that needs
no service): the import time, and the wall time of a commit that appends N Parquet files already written
(what ingest does at each commit), over 30 commits. Prints JSON.

    uv run --with 'pyiceberg[sql-sqlite]' python benchmarks/bench_table_format.py 32
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.join(tempfile.gettempdir(), "bench_table_format")
ROUNDS, N = 30, int(sys.argv[1]) if len(sys.argv) > 1 else 4


def imp(mod):
    out = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {mod}"], check=True)
        out.append(time.perf_counter() - t)
    return sorted(out)[2]


def files(sub, k):
    os.makedirs(f"{ROOT}/{sub}/parts/step_block={k}", exist_ok=True)
    paths = []
    for i in range(N):
        t = pa.table({"step": pa.array([k * 64 + i] * 256, pa.int64()), "reward": pa.array([0.5] * 256)})
        p = f"{ROOT}/{sub}/parts/step_block={k}/p{k:04d}{i:03d}.parquet"
        pq.write_table(t, p)
        paths.append(p)
    return paths


def delta():
    from deltalake import CommitProperties, DeltaTable, Schema, Transaction
    from deltalake.transaction import AddAction, create_table_with_add_actions

    schema = pa.schema([("step", pa.int64()), ("reward", pa.float64()), ("step_block", pa.int64())])
    uri = f"{ROOT}/delta"
    times = []
    for k in range(ROUNDS):
        ps = files("delta", k)
        adds = [
            AddAction(
                os.path.relpath(p, uri),
                os.path.getsize(p),
                {"step_block": str(k)},
                int(time.time() * 1000),
                True,
                json.dumps({"numRecords": 256}),
            )
            for p in ps
        ]
        t = time.perf_counter()
        props = CommitProperties(app_transactions=[Transaction("rlboard", k + 1)], max_commit_retries=0)
        if k == 0:
            create_table_with_add_actions(
                uri, Schema.from_arrow(schema), adds, partition_by=["step_block"], commit_properties=props
            )
        else:
            dt = DeltaTable(uri)
            dt.create_write_transaction(
                adds, "append", schema, partition_by=["step_block"], commit_properties=props
            )
        times.append(time.perf_counter() - t)
    assert len(DeltaTable(uri).file_uris()) == ROUNDS * N
    return times


def iceberg():
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(f"{ROOT}/ice", exist_ok=True)
    cat = SqlCatalog("x", uri=f"sqlite:///{ROOT}/ice/cat.db", warehouse=f"file://{ROOT}/ice")
    cat.create_namespace("r")
    schema = pa.schema([("step", pa.int64()), ("reward", pa.float64())])
    tbl = cat.create_table("r.run", schema=schema)
    times = []
    for k in range(ROUNDS):
        ps = files("ice", k)
        t = time.perf_counter()
        tbl = cat.load_table("r.run")
        tbl.add_files(ps)
        times.append(time.perf_counter() - t)
    return times


shutil.rmtree(ROOT, ignore_errors=True)
res = {"import_s": {"deltalake": imp("deltalake"), "pyiceberg.catalog.sql": imp("pyiceberg.catalog.sql")}}
for name, fn in (("delta", delta), ("iceberg", iceberg)):
    ts = sorted(fn())
    res[f"{name}_commit_ms_median"] = round(1000 * ts[len(ts) // 2], 1)
    res[f"{name}_commit_ms_max"] = round(1000 * ts[-1], 1)
res["files_per_commit"] = N
res["commits"] = ROUNDS
print(json.dumps(res))
