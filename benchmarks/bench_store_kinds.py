"""What each derived kind of a store costs and saves: its bytes, its build seconds and the time of the page
work that reads it, with the kind and without it (the reader's own fallback when the kind is absent).

    uv run python benchmarks/bench_store_kinds.py RUN_DIR --cache-dir DIR [--rounds 7] [--no-ingest]
        [--plain]

- ingest (in this process, unless ``--no-ingest``): the whole ingest's seconds, and each kind's
  ``build(commit)`` seconds summed over the commits (``data.derived.registry.KINDS`` wrapped with a timer);
- bytes: per kind, the files of its pattern in the store (the last commit's and the one before, which a
  commit keeps for readers mid-read); the parts, scalars and the whole store beside them; ``--plain``: the
  same lines written by Polars as plain zstd Parquet, one file per rollout file (``/work/bench/plain.py``);
- pages: per kind, the data function of the page that reads it, timed cold (every cache of ``data``
  cleared first) on the store as committed (``with``) and on the same store with the kind's manifest entry
  removed (``without``: what a reader of a commit that wrote none does; the text index, found by file and
  not by entry, is hidden from the search instead). ``with`` and ``without`` alternate within each round,
  their order turned every other round, and the figure is the median over ``--rounds`` of each round's
  ratio without / with (the machine is shared: its drifting speed falls on both alike). A kind whose
  reader has no fallback (``steps``) is given as required. ``--against STORE``: each page timed on this
  store and on ``STORE`` (the same lines written another way: a change of codec or layout, measured with
  the same reader), ``with`` = this store, ``without`` = the other; here also ``parts`` (one response's row,
  the tokens page) and ``parts_search`` (a search of one step, which reads the parts' texts).

Besides the wall-clock ratio, ``cpu_ratio``: the same of the process's CPU time (all its threads), which
the machine's other work moves less.

Prints one JSON object; on stderr a Markdown table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SEARCH = "(?i)whales"  # a word of the generator's vocabulary (as benchmarks/bench_scale.py searches)
SEARCH_SECONDS = 600.0


def _du(paths) -> int:
    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.is_file():
            total += p.stat().st_size
    return total


def ingest(run_dir: Path, cache_dir: Path) -> dict:
    """Ingest ``run_dir`` afresh, each kind's build timed: ``{"seconds", "build_s": {kind: s}}``."""
    from data.config import DEFAULT_PAD_TOKENS
    from data.derived import registry
    from data.ingest import ingest_run
    from data.store.layout import store_dir_for

    shutil.rmtree(store_dir_for(cache_dir, run_dir, DEFAULT_PAD_TOKENS), ignore_errors=True)
    spent: dict[str, float] = {k.name: 0.0 for k in registry.KINDS}

    def timed(kind):
        @functools.wraps(kind.build)
        def build(c):
            t0 = time.perf_counter()
            try:
                kind.build(c)
            finally:
                spent[kind.name] += time.perf_counter() - t0

        return build

    kinds = registry.KINDS
    registry.KINDS = tuple(
        k if k.build is None else registry.Kind(k.name, k.pattern, k.format, timed(k), k.collect, k.why)
        for k in kinds
    )
    try:
        t0 = time.perf_counter()
        ingest_run(run_dir, cache_dir, DEFAULT_PAD_TOKENS)
        seconds = time.perf_counter() - t0
    finally:
        registry.KINDS = kinds
    return {"seconds": round(seconds, 2), "build_s": {k: round(v, 2) for k, v in spent.items()}}


def plain_parquet(run_dir: Path, work: Path) -> int:
    """Bytes of the run's lines as Polars writes them, zstd Parquet, one file per rollout file."""
    import polars as pl

    total = 0
    for i, f in enumerate(sorted(run_dir.glob("*.jsonl"))):
        out = work / f"plain.{i}.parquet"
        pl.read_ndjson(f, infer_schema_length=None).write_parquet(out, compression="zstd")
        total += out.stat().st_size
        out.unlink()
    return total


def sizes(store_dir: Path) -> dict:
    """Bytes per derived kind (its pattern's files) and of the store's other folders, and in all."""
    from data.derived.registry import KINDS

    out = {k.name: _du(store_dir.glob(k.pattern)) for k in KINDS}
    for folder in ("parts", "scalars", "issues", "_delta_log", "manifests"):
        out[folder] = _du([store_dir / folder])
    out["store"] = _du([store_dir])
    return out


def _open(store_dir: Path):
    """The store committed in ``store_dir``, whatever its ``STORE_FORMAT``: ``--against`` compares a store of
    this version with one of the version before a change of codecs, which the same readers read (each file
    says its codec); ``open_store`` reads only this version's."""
    from data.store.manifest import MANIFEST, Manifest
    from data.store.reader import RunStore

    return RunStore(store_dir, Manifest.from_bytes((store_dir / MANIFEST).read_bytes()))


def _without(store, kind: str):
    """``store`` as if its last commit wrote no ``kind``, under a version of its own (no cache mixes them)."""
    from data.store.reader import RunStore

    class Without(RunStore):
        @property
        def version(self) -> str:
            return f"{super().version}:without-{kind}"

    return Without(store.dir, store.manifest.without(kind))


def _clear() -> None:
    """Forget every result of ``data`` this process keeps (its LRUs and the results cache on disk)."""
    import data.cache as cache
    from data.search.engine import engine
    from data.store import index

    for name, module in list(sys.modules.items()):
        if name == "data" or name.startswith("data."):
            for fn in list(vars(module).values()):
                if callable(getattr(fn, "cache_clear", None)) and hasattr(fn, "peek"):  # data.cache.shared
                    fn.cache_clear()
    engine().clear_hits()
    index._FACTS.clear()
    with cache._OPEN_LOCK:
        disks = list(cache._OPEN.values())
    for d in disks:
        d.clear()


@contextmanager
def _no_text_index(active: bool):
    """The search over every step as a reader of a store without its text index: the parts are scanned."""
    import data.search.engine as engine

    real = engine.text_index_files
    if active:
        engine.text_index_files = lambda store: []
    try:
        yield
    finally:
        engine.text_index_files = real


def pages(store) -> dict:
    """Per kind, ``fn(store, without)``: the page work that reads it (``without``: the kind is absent)."""
    from data import curves, signals
    from data.cache import StoreKey
    from data.compare import prompts as compare_prompts
    from data.prompts import aggregates, detail
    from data.queries import ResponseFilter
    from data.responses import page_rows
    from data.search.engine import engine
    from data.store.index import build_index

    m = store.manifest
    table = aggregates.prompt_table(store)
    # Five prompts spread over the list by their count of responses (the fallback scans their steps).
    ordered = table.sort("n_responses", "prompt_key").get_column("prompt_key")
    keys = [ordered[i * (ordered.len() - 1) // 4] for i in range(5)]
    turn = iter(range(10**9))
    steps = store.steps().get_column("step").to_list()

    def prompt_history(s, without):  # the prompts page with a prompt selected
        detail._history.__wrapped__(StoreKey(s), keys[next(turn) % len(keys)])

    def search_all(s, without):  # a search over every step: its matches (the count's pass)
        with _no_text_index(without):
            engine()._search_texts(StoreKey(s), SEARCH, None, SEARCH_SECONDS)

    def search_first_block(s, without):  # the responses page, step=all&q=…: its first block
        page_rows(s, ResponseFilter(q=SEARCH), "reward", True, 0, 100, SEARCH_SECONDS)

    def first_block(s, without):  # the responses page, step=all sorted by KL: its first block
        page_rows(s, ResponseFilter(), "kl_mean", True, 0, 100, SEARCH_SECONDS)

    def one_response(s, without):  # the tokens page: one response's row, every column, from its part
        part = s.part_ids()[next(turn) % len(s.part_ids())]
        s.read_rows(part, [17])

    def search_step(s, without):  # a search of one step: it reads the texts of the parts (not the index)
        engine()._search_texts(StoreKey(s), SEARCH, steps[next(turn) % len(steps)], SEARCH_SECONDS)

    return {
        "parts": one_response,
        "parts_search": search_step,
        "pidx": prompt_history,
        "text": search_all,
        "texttop": search_first_block,
        "topk": first_block,
        "prompts": lambda s, w: aggregates._table.__wrapped__(StoreKey(s)),
        "matches": lambda s, w: compare_prompts._matches(StoreKey(s)),
        "ends": lambda s, w: signals._truncation.__wrapped__(
            StoreKey(s), tuple(m.pad_tokens), tuple(m.ends_with)
        ),
        "cells": lambda s, w: curves._heatmap.__wrapped__(StoreKey(s), "reward"),
        "facts": lambda s, w: build_index(
            s.dir, s.manifest.parts, s.manifest.packs, s.manifest.derived_name("facts")
        ),
    }


def time_pages(store, rounds: int, only: list[str] | None, other=None) -> dict:
    """Per kind: median ms with and without it, and the median of the rounds' ratios without / with;
    with ``other`` (a store of the same lines written otherwise), ``store``'s and ``other``'s, each whole,
    and the ratios other / store."""
    fns = pages(store)
    out: dict = {} if other else {"steps": {"note": "required: RunStore.steps has no fallback"}}
    for kind, fn in fns.items():
        if (only and kind not in only) or (kind.startswith("parts") and other is None):
            continue
        variants = {False: store, True: other or _without(store, kind)}
        absent = {False: False, True: other is None}
        try:  # once each, untimed: the process's first reads (imports, the scalars in memory)
            for w, s in variants.items():
                _clear()
                fn(s, absent[w])
        except Exception as e:  # noqa: BLE001 - a reader with no fallback: say so
            out[kind] = {"note": f"no fallback: {type(e).__name__}: {e}"[:200]}
            continue
        ms: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for r in range(rounds):
            for w in (False, True) if r % 2 == 0 else (True, False):
                _clear()
                t0, c0 = time.perf_counter(), time.process_time()
                fn(variants[w], absent[w])
                ms[w].append((time.perf_counter() - t0) * 1000)
                cpu[w].append((time.process_time() - c0) * 1000)

        def ratio(xs):
            return round(
                statistics.median(b / max(a, 1e-3) for a, b in zip(xs[False], xs[True], strict=True)), 2
            )

        out[kind] = {
            "with_ms": round(statistics.median(ms[False]), 1),
            "without_ms": round(statistics.median(ms[True]), 1),
            "ratio": ratio(ms),
            # CPU time of the process's threads: less moved than wall time by the machine's other work
            "cpu_ratio": ratio(cpu),
        }
        print(kind, out[kind], file=sys.stderr, flush=True)
    return out


def table(res: dict) -> str:
    head = (
        "this store (ms) | --against (ms) | against / this"
        if "against" in res
        else "with (ms) | without (ms) | without / with"
    )
    lines = [f"| kind | bytes (MB) | build s | {head} |", "|---|---|---|---|---|---|"]
    extra = [k for k in res["pages"] if k not in res["bytes"]]  # parts_search
    for kind, size in [*res["bytes"].items(), *((k, 0) for k in extra)]:
        p = res["pages"].get(kind, {})
        b = res.get("ingest", {}).get("build_s", {}).get(kind, "")
        if "note" in p:
            cells = [p["note"], "", ""]
        else:
            cells = [str(p.get(c, "")) for c in ("with_ms", "without_ms", "ratio")]
        lines.append(f"| {kind} | {size / 1e6:.1f} | {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--cache-dir", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-ingest", action="store_true", help="reuse the store in --cache-dir")
    ap.add_argument("--plain", action="store_true", help="also the run's lines as plain zstd Parquet")
    ap.add_argument("--pages", nargs="*", help="time only these kinds' pages (none: no page)")
    ap.add_argument("--store", type=Path, help="the store folder to read (default: RUN_DIR's in --cache-dir)")
    ap.add_argument("--against", type=Path, help="a store folder of the same lines: pages timed on both")
    args = ap.parse_args(argv)

    from data.config import DEFAULT_PAD_TOKENS
    from data.store.layout import store_dir_for
    from data.store.reader import open_store

    run_dir, cache = args.run_dir.resolve(), args.cache_dir.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    res: dict = {"run": str(run_dir), "load": os.getloadavg()[0]}
    if not args.no_ingest:
        res["ingest"] = ingest(run_dir, cache)
    store_dir = store_dir_for(cache, run_dir, DEFAULT_PAD_TOKENS)
    res["bytes"] = sizes(args.store or store_dir)
    if args.plain:
        res["plain"] = plain_parquet(run_dir, cache)
        res["store_over_plain"] = round(res["bytes"]["store"] / res["plain"], 3)
    store = _open(args.store) if args.store else open_store(store_dir)
    if args.pages is None or args.pages:
        other = None
        if args.against:
            other = _open(args.against)
            res["against"] = {"store": str(args.against), "bytes": sizes(args.against)}
        res["pages"] = time_pages(store, args.rounds, args.pages, other)
    else:
        res["pages"] = {}
    res["load_after"] = os.getloadavg()[0]
    print(json.dumps(res, indent=1))
    print(table(res), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
