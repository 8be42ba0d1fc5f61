"""The command line's view commands (issue 37): ``query`` prints a page's answer (api.registry) as JSON or
a plain table, ``snapshot`` writes it as one HTML file (api.snapshot); both from the store, without a
server. Standard output holds only the answer; progress and notes go to standard error."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from data.config import load_settings

# How long a run the URL names may take to be read before the answer is given from what is committed.
READ_WAIT_SECONDS = 3600.0
TABLE_CELL_CHARS = 60  # a cell of --format table is cut here (the JSON has it whole)


class ViewError(Exception):
    """What the command cannot answer (unknown page or run, a root it may not read, a bad query): one line,
    exit code 2."""


def _board(args):
    """The process's board for ``--root`` / ``--cache-dir`` (as ``serve`` configures its workers')."""
    from app import prepare_root  # (the shell module, already loaded: `python app.py` runs it)
    from data import service

    settings = load_settings(root=args.root, cache_dir=args.cache_dir)
    if args.root and isinstance(settings.root, Path) and not settings.root.is_dir():
        raise ViewError(f"no such folder: {args.root}")
    prepare_root(settings)
    board = service.configure(settings)
    scan = board.scan(fresh=True)
    if scan.problem is not None:
        raise ViewError(f"{scan.problem.headline} {scan.problem.detail}")
    return board


def runs_named(path: str, query: dict, runs: dict) -> list[str]:
    """The runs a view at ``path`` shows for ``query``: every run of the root on the runs page, the runs
    its ``run=`` names elsewhere (or the one the page falls back to); a name not under the root raises."""
    from data.views.paths import RUNS, shown_run

    if path == RUNS:
        return list(runs)
    named = [r for r in query.get("run", []) if r]
    for r in named:
        if r not in runs:
            raise ViewError(f"unknown run {r!r} (runs: {', '.join(runs) or 'none'})")
    if named:
        return list(dict.fromkeys(named))
    shown = shown_run(path, None, runs)
    return [shown] if shown else []


def _read(board, run: str) -> None:
    """Bring ``run``'s store up to date through the board, as a server's look does (waiting for another
    process that is reading it: the store's file lock); progress on standard error."""
    from cli import _Bar

    bar, t0 = _Bar(run), time.monotonic()
    if not bar.tty:
        print(f"reading run {run}…", file=sys.stderr, flush=True)
    board.refresh(run, force=True)
    status = board.status(run)
    while status.running and time.monotonic() - t0 < READ_WAIT_SECONDS:
        if status.total:
            bar(status.done, status.total)
        time.sleep(0.1)
    if status.error:
        print(f"warning: reading run {run} failed: {status.error}", file=sys.stderr)
    elif not bar.tty:
        print(f"run {run} read in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)


def answer_of(args):
    """``(name, answer, seconds)`` for ``args.url`` (``/page?query``): the runs it names read first."""
    from api.registry import UnknownView, by_path
    from data.queries import QueryError
    from data.views.codec import parse_search

    url = args.url if args.url.startswith("/") else "/" + args.url
    path, _, search = url.partition("?")
    try:
        name, answer = by_path(path)
    except UnknownView as e:
        raise ViewError(str(e)) from None
    board = _board(args)
    query = parse_search(search)
    for run in runs_named("/" + path.strip("/"), query, board.runs()):
        _read(board, run)
    t0 = time.monotonic()
    try:
        got = answer(query)
    except QueryError as e:
        raise ViewError(str(e)) from None
    return name, got, time.monotonic() - t0


def _cell(value) -> str:
    from api.snapshot import cell_text

    text = cell_text(value, TABLE_CELL_CHARS).replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return text.replace("\r", "\\r")


def table_text(body: dict) -> str:
    """The answer's JSON (``to_json``) as plain text: a line of what was read, its notices, its figures by
    id and title, then each table, the main one first, in aligned columns (cells cut at
    :data:`TABLE_CELL_CHARS`; newlines and tabs written as ``\\n`` and ``\\t``)."""
    from api.snapshot import store_line

    out = [
        f"page {body['page']}"
        + (f" · run {body['run']}" if body["run"] else "")
        + f" · {store_line(body['store'])}"
    ]
    out += [f"notice: {_cell(n)}" for n in body["notices"]]
    for fid, fig in body["figures"].items():
        out.append(f"figure {fid}: {_cell(fig['title'] or '')} ({len(fig['traces'])} traces)")
    tables = sorted(body["tables"].items(), key=lambda kv: kv[0] != (body.get("main") or ""))
    for tid, t in tables:
        shown = len(t["rows"])
        total = t["total"] if t["total"] is not None else shown
        out.append(f"\ntable {tid}: {shown} of {total} rows" + (f" ({t['cut_off']})" if t["cut_off"] else ""))
        grid = [[t["labels"].get(c, c) for c in t["columns"]]]
        grid += [[_cell(r.get(c)) for c in t["columns"]] for r in t["rows"]]
        widths = [max(len(row[i]) for row in grid) for i in range(len(t["columns"]))]
        out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in grid]
    return "\n".join(out) + "\n"


def cmd_query(args) -> int:
    from api.answer import to_json

    name, answer, _ = answer_of(args)
    body = to_json(answer)
    if args.format == "table":
        body["main"] = answer.main
        text = table_text(body)
    else:
        text = json.dumps(body, allow_nan=False) + "\n"
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head`): no traceback, and none at exit when Python flushes stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


def cmd_snapshot(args) -> int:
    from api.snapshot import filename, render

    taken = dt.datetime.now(dt.UTC)
    name, answer, seconds = answer_of(args)
    url = args.url if args.url.startswith("/") else "/" + args.url
    out = Path(args.output or filename(name, answer.run, taken))
    out.write_text(render(answer, name, url, taken, seconds), encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    """The ``query`` and ``snapshot`` commands on the command line's sub-parsers."""
    for cmd, help_, desc in (
        ("query", "print a page's answer as JSON (or a table)",
         "Print what a page shows for URL (/page?query), as the API's JSON, from the store (no server)."),
        ("snapshot", "write a page's view as one self-contained HTML file",
         "Write the view at URL (/page?query) as one HTML file that opens from disk with no network."),
    ):  # fmt: skip
        p = sub.add_parser(cmd, help=help_, description=desc)
        p.add_argument("url", help='the page\'s path and query, e.g. "/reward?run=R&step=5"')
        p.add_argument("--root", help="rollout root: one sub-folder of *.jsonl files per run")
        p.add_argument("--cache-dir", help="where the Parquet stores live (a folder, or s3://bucket/prefix)")
        if cmd == "query":
            p.add_argument(
                "--format", choices=("json", "table"), default="json", help="json (default) or table"
            )
        else:
            p.add_argument("-o", "--output", help="file to write (default: <page>-<run>-<time>.html here)")
