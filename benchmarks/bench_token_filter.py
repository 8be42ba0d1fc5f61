"""The token filter and the drifting-tokens board on a large store: cold, with the token index and without it.

    uv run python benchmarks/bench_token_filter.py --store STORE_DIR --work DIR [--rounds 3] [--seconds 10] \
        [--token Ġzyzzyva] [--before SRC]

``STORE_DIR`` is a run's store as ingest wrote it (e.g. the 2.56M-response run of ``bench_scale.py``, kept
with ``--keep``). Nothing is written there: ``DIR`` gets a store of links to its files (its own
``manifest.json``, with this version's ``STORE_FORMAT`` when the store's is older, which the files' layout
does not depend on, said in the output), and the token files (``tokens/``) a commit of this version writes
are built there once, timed (what ingest adds), their bytes given beside the parts' and the text index's.
With ``--before SRC`` (another checkout of the project, e.g. ``git worktree add`` of an older commit), a
second linked store gets the token files SRC's code writes, built in alternation with this version's (each
build in its own process), and the queries run with SRC's code on it too (``before``), interleaved with
this version's (``index``) and the scan.

Each query then runs in a fresh child process with an empty results cache (cold: nothing of the run cached
but the operating system's page cache, which the first round warms), with the index (``index``) and without
it (``scan``: the parts' token strings decoded in the search helper, the fallback), the two alternating
within a round, their order turned every other round; the figure is the median of the rounds. Each child
also gives its resident memory before and after the query (the worker's, not the helper's).

Queries: ``absent`` a token the run never holds (``^Ġ\\.$``, k3 >= 100): present in 0 % of responses;
``rare`` the token ``--token`` (e.g. the one ``generate.py --rare-token`` planted in 0.5 % of responses; the
run's least frequent without it) with k3 >= 1; ``rare_all`` the same token, no bound (every response holding
it); ``common`` the run's least frequent token in more than 1 % of responses (1.5x ``--posted-share``,
which sets the share of a file's rows a token is posted within, e.g. to post the generated run's rarest
token, in 5.5 % of responses, where no token was planted), k3 >= 1; ``broad`` any token (``.``, k3 >= 0.5), which the time limit cuts off; ``drift`` the board of the
run's first and last steps. Prints one JSON object, and a Markdown table on stderr. The machine's load
average is given beside each figure: figures taken under load are not comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUERIES = {
    "absent": {"tok": r"^Ġ\.$", "tok_min": 100.0},
    "rare": {"tok": None, "tok_min": 1.0},  # --token, else the run's least frequent token (found at setup)
    "rare_all": {"tok": None, "tok_min": None},
    "common": {"tok": None, "tok_min": 1.0},  # the least frequent token in > 1 % of responses
    "broad": {"tok": ".", "tok_min": 0.5},
}
BUILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from data.derived import tokens as token_index
from data.store.table import table_files
if sys.argv[3] != "None":
    token_index.POSTED_SHARE = float(sys.argv[3])
if sys.argv[4] != "None":  # post only this token, wherever it is (a stand-in for a planted one)
    table_of = token_index.token_table
    seen = {}

    def token_table(parts):
        table, vocab = table_of(parts)
        seen["vocab"] = vocab
        return table, vocab

    token_index.token_table = token_table
    token_index.posted_ids = lambda table: [seen["vocab"].index(sys.argv[4])] if sys.argv[4] in seen["vocab"] else []
store_dir = __import__("pathlib").Path(sys.argv[2])
rels = list(table_files(json.loads((store_dir / "manifest.json").read_text())))
t, cpu = time.monotonic(), time.process_time()
written = token_index.index_new_parts(store_dir, rels)
took = {"build_seconds": round(time.monotonic() - t, 2), "build_cpu_seconds": round(time.process_time() - cpu, 2)}
print(json.dumps({"part_files": len(rels), "written": len(written), **took}))
"""

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
store_dir, mode, query, seconds = sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), float(sys.argv[5])

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

from data.store import open_store
from data.queries import ResponseFilter
from data.search import tokens
from data.derived import tokens as token_index
from data.token_drift import drifting_tokens
if mode == "scan":
    token_index.token_files = lambda *a: None
store = open_store(store_dir)
steps = store.steps().get_column("step").to_list()
before = rss_mb()
t = time.monotonic()
if query.get("drift"):
    out = {"rows": drifting_tokens(store, steps[0], steps[-1]).height}
else:
    flt = ResponseFilter(tok=query["tok"], tok_metric="kl", tok_min=query["tok_min"])
    hits = tokens.token_hits(store, flt, seconds)
    out = {"rows": hits.frame.height, "files_read": hits.files_read, "files": hits.files, "cut": hits.cut}
out.update(seconds=round(time.monotonic() - t, 3), rss_before_mb=round(before, 1), rss_after_mb=round(rss_mb(), 1))
print(json.dumps(out))
"""


def load() -> float:
    return round(os.getloadavg()[0], 2)


def store_format(code: Path) -> int:
    """The ``STORE_FORMAT`` of the checkout ``code``."""
    return int(
        re.search(r"^STORE_FORMAT = (\d+)", (code / "data/store/layout.py").read_text(), re.M).group(1)
    )


def linked_store(src: Path, work: Path, code: Path = REPO) -> tuple[Path, dict]:
    """A store in ``work`` of links to ``src``'s files, its own manifest (format set to ``code``'s)."""
    STORE_FORMAT = store_format(code)  # noqa: N806
    dst = work / src.name
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.name in ("manifest.json", ".lock", "tokens") or (dst / p.name).exists():
            continue
        (dst / p.name).symlink_to(p)
    manifest = json.loads((src / "manifest.json").read_text())
    note = {"store_format": manifest["format"]}
    if manifest["format"] != STORE_FORMAT:
        note["format_set_to"] = STORE_FORMAT  # the parts' layout is the same; only the token files are new
        manifest["format"] = STORE_FORMAT
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst, note


def build_index(
    store_dir: Path, src: Path = REPO, posted_share: float | None = None, post_only: str | None = None
) -> dict:
    """The token files of every committed file of parts/ (what ingest's commits write) by ``src``'s code,
    in a fresh process, timed in wall and CPU seconds (any built before are removed first); postings for
    the tokens in at most ``posted_share`` of a file's rows (the code's own share for None), or of the token
    ``post_only`` alone."""
    shutil.rmtree(store_dir / "tokens", ignore_errors=True)
    args = [sys.executable, "-c", BUILD, str(src), str(store_dir), str(posted_share), str(post_only)]
    out = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip())

    def size(folder: str, pattern: str = "*") -> int:
        return sum(f.stat().st_size for f in (store_dir / folder).resolve().rglob(pattern) if f.is_file())

    return {
        **out,
        "tokens_mb": round(size("tokens") / 2**20, 1),
        "postings_mb": round(size("tokens", "*.post.arrow") / 2**20, 2),
        "parts_mb": round(size("parts") / 2**20, 1),
        "text_mb": round(size("text") / 2**20, 1) if (store_dir / "text").exists() else None,
        "load": load(),
    }


def token_shares(store_dir: Path) -> dict[str, float]:
    """Each token string of the run and the share of responses holding it (from the token files)."""
    import polars as pl

    from data.derived import tokens as token_index

    counts: dict[str, int] = {}
    rows = 0
    for f in sorted((store_dir / token_index.FOLDER).glob("*.arrow")):
        if f.name.endswith(token_index.POSTINGS + ".arrow"):
            continue
        vocab = token_index.vocabulary(f)
        ids = pl.read_ipc(f, columns=["ids"]).with_row_index("r")
        per = ids.explode("ids").drop_nulls().unique().group_by("ids").len()
        for i, n in per.iter_rows():
            counts[vocab[i]] = counts.get(vocab[i], 0) + n
        rows += ids.height
    return {t: n / rows for t, n in counts.items()}


def run_child(store_dir: Path, mode: str, query: dict, seconds: float, src: Path = REPO) -> dict:
    shutil.rmtree(store_dir.parent / "results-cache", ignore_errors=True)
    args = [sys.executable, "-c", CHILD, str(src), str(store_dir), mode, json.dumps(query), str(seconds)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return {**json.loads(out.strip().splitlines()[-1]), "load": load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="the search's time limit")
    ap.add_argument("--token", default=None, help="the rare token (default: the run's least frequent)")
    ap.add_argument("--before", type=Path, default=None, help="another checkout to compare with")
    ap.add_argument("--build-rounds", type=int, default=2, help="builds of each index with --before")
    ap.add_argument("--posted-share", type=float, default=None, help="post tokens in <= this share of a file")
    ap.add_argument("--post-only", default=None, help="post this token alone, in every file (a stand-in)")
    args = ap.parse_args()
    store_dir, note = linked_store(args.store.resolve(), args.work)
    stores = {"index": (store_dir, REPO), "scan": (store_dir, REPO)}
    if args.before:
        before_dir, _ = linked_store(args.store.resolve(), args.work / "before", args.before.resolve())
        stores["before"] = (before_dir, args.before.resolve())
        out = {"store": str(args.store), **note, "before_src": str(args.before)}
        for r in range(args.build_rounds):  # alternating, each in its own process
            out[f"index_before_{r}"] = build_index(before_dir, args.before.resolve())
            out[f"index_{r}"] = build_index(store_dir, REPO, args.posted_share, args.post_only)
    else:
        out = {
            "store": str(args.store),
            **note,
            "index": build_index(store_dir, REPO, args.posted_share, args.post_only),
        }
    from data.token_drift import exact_token_pattern

    shares = token_shares(store_dir)
    token = args.token or min(shares, key=lambda t: (shares[t], t))
    floor = 0.01 if args.post_only else max(0.01, 1.5 * (args.posted_share or 0.0))  # one posted in no file
    common = min((t for t in shares if shares[t] > floor and t != token), key=lambda t: (shares[t], t))
    out["rare_token"] = {"token": token, "share_of_responses": round(shares.get(token, 0.0), 5)}
    out["common_token"] = {"token": common, "share_of_responses": round(shares[common], 5)}
    queries = {k: dict(v) for k, v in QUERIES.items()}
    for k in ("rare", "rare_all"):
        queries[k]["tok"] = exact_token_pattern(token)
    queries["common"]["tok"] = exact_token_pattern(common)
    queries["drift"] = {"drift": True}
    results: dict[str, dict[str, list[dict]]] = {k: {m: [] for m in stores} for k in queries}
    for r in range(args.rounds):
        for name, query in queries.items():
            modes = list(stores) if r % 2 == 0 else list(reversed(stores))
            if name == "drift":
                modes = [m for m in modes if m != "scan"]  # reads two steps' token lists: no index involved
            for mode in modes:
                d, src = stores[mode]
                results[name][mode].append(run_child(d, mode, query, args.seconds, src))
    out["queries"] = {}
    for name, by_mode in results.items():
        row = {}
        for mode, runs in by_mode.items():
            if runs:
                last = runs[-1]
                row[mode] = {
                    "median_seconds": statistics.median(x["seconds"] for x in runs),
                    "runs": [x["seconds"] for x in runs],
                    "loads": [x["load"] for x in runs],
                    **{k: v for k, v in last.items() if k not in ("seconds", "load")},
                }
        out["queries"][name] = {"query": queries[name], **row}
    print(json.dumps(out, indent=1, ensure_ascii=False))
    print(
        "| query | index s | before s | scan s | rows | files read | worker RSS MB (index; before) |",
        file=sys.stderr,
    )
    print("|---|---|---|---|---|---|---|", file=sys.stderr)
    for name, row in out["queries"].items():
        i, b, s = row.get("index", {}), row.get("before", {}), row.get("scan", {})
        print(
            f"| {name} | {i.get('median_seconds')} | {b.get('median_seconds', '–')} | "
            f"{s.get('median_seconds', '–')} | {i.get('rows')} | {i.get('files_read', '–')} / "
            f"{i.get('files', '–')} | {i.get('rss_before_mb')} → {i.get('rss_after_mb')}; "
            f"{b.get('rss_before_mb', '–')} → {b.get('rss_after_mb', '–')} |",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
