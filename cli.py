"""The command line of RL Logging Board: ``serve`` (the default), ``ingest``, ``export``, and ``query`` and
``snapshot`` (cli_views.py).

``python app.py …`` runs it too (app.py hands its arguments here); ``app.py`` stays the Dash shell.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

import cli_views
from data.config import SettingsError, load_settings


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


class _Bar:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, label: str):
        self.label = label
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = 1.0 if not total else done / total
        width = 30
        bar = "█" * int(frac * width) + "·" * (width - int(frac * width))
        mb = done / 1e6
        rate = mb / max(now - self.t0, 1e-6)
        sys.stderr.write(f"\r{self.label[:24]:<24} {bar} {frac * 100:5.1f}%  {mb:8.1f} MB  {rate:6.1f} MB/s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class _Unreadable(Exception):
    """PATH cannot be listed: the message says why, whose folder it is and who runs this."""


def _runs_at(path: Path) -> dict[str, tuple[Path, str]]:
    """Runs at PATH, ``{name: (folder, split)}``: each sub-folder holding rollout files (its validation
    files a run of their own), or PATH itself when it holds rollout files. Run folders it may not read are
    skipped with a warning; PATH itself unreadable raises :class:`_Unreadable`."""
    from data.store import folder_runs, is_rollout_file, scan_root

    scan = scan_root(path)
    if scan.problem is not None:
        raise _Unreadable(f"{scan.problem.headline} {scan.problem.detail}")
    for name, reason in scan.unreadable.items():
        print(f"warning: {path / name}: {reason}; skipped", file=sys.stderr)
    if any(is_rollout_file(p.name) and p.is_file() for p in path.iterdir()):
        return {name: (path, split) for name, split in folder_runs(path.resolve().name, path).items()}
    return {name: (folder, scan.split(name)) for name, folder in scan.runs.items()}


def _root_of(path, run_dir):
    """The rollout root a run read from PATH lies in: PATH, or its parent where PATH is the run folder."""
    return path.parent if str(run_dir) == str(path) else path


def _folder(text: str, settings):
    """PATH as a local folder (None when there is none) or an object store's prefix (``s3://bucket/runs``,
    read with the AWS_* variables; one that cannot be listed is said by :func:`_runs_at`)."""
    from data.config import location_of

    path = location_of(text, settings)
    if isinstance(path, Path) and not path.is_dir():
        return None
    return path


def _reading(settings, split: str, root=None) -> dict:
    """How ingest_run reads a run: its split and the dialect and reward weight settings (and the stores on
    object storage, if they are); ``root``: the rollout root it lies in (its rlboard.toml's [fields])."""
    return {
        "root": root,
        "split": split,
        "dialect": settings.dialect,
        "reward_weights": settings.reward_weights,
        "tokenizer": settings.tokenizer,
        "shared": settings.shared,
    }


def cmd_ingest(args) -> int:
    from data.ingest import ingest_run

    spread = None
    if args.ray or args.ray_address:  # the files read on a Ray cluster (an optional dependency)
        from data.ingest.distributed import ray_missing, spread_on_ray, unreachable

        if problem := ray_missing() or unreachable(args.ray_address):
            return _fail(problem)
        spread = spread_on_ray(args.ray_address)
    settings = load_settings(cache_dir=args.cache_dir)
    path = _folder(args.path, settings)
    if path is None:
        return _fail(f"no such folder: {args.path}")
    runs = _runs_at(path)
    if not runs:
        return _fail(f"no run under {path} (a run is a folder of rollout files: *.jsonl, *.parquet, …)")
    out, failed = [], []
    for name, (run_dir, split) in runs.items():
        try:
            res = ingest_run(
                run_dir,
                settings.cache_dir,
                settings.pad_tokens,
                progress=_Bar(name),
                spread=spread,
                **_reading(settings, split, _root_of(path, run_dir)),
            )
        except Exception as e:  # noqa: BLE001 - one run that fails costs only itself: said, the others read
            if isinstance(e, OSError) and e.errno:  # a full disk, a read-only cache: what the user can fix
                where = settings.store_url or settings.cache_dir
                reason = f"cannot store run {name!r} in {where}: {os.strerror(e.errno)}"
            else:
                reason = f"reading run {name!r} failed: {type(e).__name__}: {e}"
            print(f"\nerror: {reason}", file=sys.stderr)
            failed.append(name)
            out.append({"run": name, "error": reason})
            continue
        out.append(res.summary())
        if not args.json:
            print(
                f"{name}: {res.files} files, {res.samples} samples, {res.steps} steps, {res.tokens} tokens, {res.bad_lines} bad lines ({res.bytes_read / 1e6:.1f} MB read in {res.seconds:.1f} s)"
            )
    if args.json:
        print(json.dumps({"runs": out}))
    if failed:
        print(f"error: {len(failed)} of {len(runs)} runs failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_export(args) -> int:
    from data.export import FORMATS, export_stream
    from data.ingest import ingest_run
    from data.queries import ResponseFilter
    from data.run_context import context_of
    from data.store import open_store

    settings = load_settings(cache_dir=args.cache_dir)
    path = _folder(args.path, settings)
    if path is None:
        return _fail(f"no such folder: {args.path}")
    runs = _runs_at(path)
    if args.run not in runs:
        return _fail(f"unknown run {args.run!r} under {path} (runs: {', '.join(runs) or 'none'})")
    if args.annotated and args.format not in ("jsonl", "parquet"):
        return _fail(f"--annotated exports jsonl or parquet, not {args.format!r}")
    if args.format not in FORMATS:
        return _fail(f"unknown format {args.format!r}")
    run_dir, split = runs[args.run]
    res = ingest_run(
        run_dir, settings.cache_dir, settings.pad_tokens, **_reading(settings, split, _root_of(path, run_dir))
    )
    store = open_store(res.store_dir)
    if args.annotated:  # the run's annotations with their responses (data.annotation_export)
        from data import annotation_export, annotations

        df = annotation_export.frame(store, annotations.of_run(settings, args.run), args.label)
        chunks = iter([annotation_export.to_bytes(df, args.format)])
    else:
        # A step the run lacks: the rows of the step shown, by the pages' rule, and its notice on stderr.
        step, notes = context_of(args.run, store).step(args.step) if args.step is not None else (None, [])
        for note in notes:
            print(note, file=sys.stderr)
        chunks = export_stream(store, ResponseFilter(step=step), args.format)
    if args.output:
        with open(args.output, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
    else:
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
    return 0


def _port(text: str) -> int:
    """A TCP port, 1-65535 (argparse type of ``--port``)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (1-65535)")
    return port


def _remote_problem(root: str) -> str | None:
    """Why a rollout root on an object store cannot be listed, or None; asked in a fresh process: the
    object store's client (obstore's runtime) does not survive a fork, and gunicorn forks its workers from
    this one."""
    return _in_fresh_process(_root_problem, root)


def _in_fresh_process(fn, arg: str):
    """``fn(arg)`` in a spawned process (see :func:`_remote_problem`)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, (arg,))


def _stores_problem(url: str) -> str | None:
    return load_settings(cache_dir=url).shared.problem()


def _root_problem(root: str) -> str | None:
    from data.store import scan_root

    problem = scan_root(load_settings(root=root).root).problem
    return None if problem is None else f"{problem.headline} {problem.detail}"


def _cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (taken, not an address of this machine, …), or None."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot listen on {host}:{port}: {e.strerror}"
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            return f"cannot listen on {host}:{port}: {e.strerror or e}"
    return None


def cmd_serve(args) -> int:
    settings = load_settings(root=args.root, cache_dir=args.cache_dir, host=args.host, port=args.port)
    if args.root and isinstance(settings.root, Path) and not settings.root.is_dir():
        return _fail(f"no such folder: {args.root}")
    if args.root and not isinstance(settings.root, Path):
        if problem := _remote_problem(args.root):  # a bucket misspelt, a wrong endpoint
            return _fail(problem)
    if settings.store_url is not None:
        if problem := _in_fresh_process(_stores_problem, settings.store_url):  # a bucket misspelt
            return _fail(problem)
    if reason := _cannot_listen(settings.host, settings.port):
        return _fail(reason)
    print(
        f"RL Logging Board on http://{settings.host}:{settings.port}{settings.url_prefix} (runs under {settings.root})",
        flush=True,
    )
    from app import prepare_root

    prepare_root(settings)  # once, before the workers start
    try:
        from gunicorn.app.base import BaseApplication
    except ImportError:  # gunicorn runs on POSIX only: elsewhere Flask's development server
        return _serve_flask(settings)
    methods = {"settings": settings, "load_config": _load_gunicorn_config, "load": _load_app}
    type("Server", (BaseApplication,), methods)().run()
    return 0


# `serve` runs the server the image runs (gunicorn with gunicorn.conf.py: threads, timeouts, the redacted
# access log), not Flask's development server and its warning; only the address and the settings come from
# the command line. Each worker builds the app after the fork (preload_app is off).
GUNICORN_CONF = Path(__file__).with_name("gunicorn.conf.py")


def _load_gunicorn_config(self) -> None:
    import runpy

    for key, value in runpy.run_path(str(GUNICORN_CONF)).items():
        if key in self.cfg.settings and value is not None:
            self.cfg.set(key, value)
    self.cfg.set("bind", [f"{self.settings.host}:{self.settings.port}"])


def _load_app(self):
    from app import create_app

    return create_app(self.settings).server


def _serve_flask(settings) -> int:
    from access_log import RedactingFilter
    from app import create_app

    app = create_app(settings)
    logging.getLogger("werkzeug").addFilter(RedactingFilter())  # the request log: no ?token=… in it
    app.run(host=settings.host, port=settings.port, debug=False)
    return 0


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (what is wrong, where to look) and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _parser() -> _Parser:
    parser = _Parser(
        prog="app.py",
        description="RL Logging Board: see RL fine-tuning rollouts step by step and token by token.",
        epilog="Without a command, app.py serves (app.py --port 8051 is app.py serve --port 8051). "
        "A command's options: app.py COMMAND --help. Flags win over the RLBOARD_* variables (docs/settings.md).",
    )
    sub = parser.add_subparsers(dest="cmd", title="commands", metavar="COMMAND")
    p = sub.add_parser("serve", help="serve the web app (the default)", description="Serve the web app.")
    p.add_argument("--root", help="rollout root: one sub-folder of *.jsonl files per run")
    p.add_argument("--cache-dir", help="where the Parquet stores live (a folder, or s3://bucket/prefix)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, help="port to listen on (default 8050)")
    p = sub.add_parser(
        "ingest",
        help="ingest a rollout root or one run folder into the cache",
        description="Bring the stores of the runs at PATH up to date and print what they hold.",
    )
    p.add_argument("path", help="a rollout root or one run folder")
    p.add_argument("--cache-dir", help="where the Parquet stores live (a folder, or s3://bucket/prefix)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--ray",
        action="store_true",
        help="read the files on a Ray cluster (RAY_ADDRESS, else a local one); needs the ray extra and a "
        "cache folder every worker reaches",
    )
    p.add_argument("--ray-address", metavar="ADDR", help="the Ray cluster to use (host:port); implies --ray")
    p = sub.add_parser(
        "export", help="export one row per response", description="Export one row per response of a run."
    )
    p.add_argument("path", help="a rollout root or one run folder")
    p.add_argument("--run", required=True, help="the run's folder name")
    p.add_argument("--step", type=int, help="only this step (default: every step)")
    p.add_argument("--format", default="csv", help="csv (default), jsonl or parquet")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("--cache-dir", help="where the Parquet stores live (a folder, or s3://bucket/prefix)")
    p.add_argument(
        "--annotated",
        action="store_true",
        help="export the run's annotations (label, note, token span, who, when) with their responses' prompt, "
        "response and reward, one row per annotation (--format jsonl or parquet)",
    )
    p.add_argument("--label", help="with --annotated: only the annotations of this label")
    cli_views.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else argv
    # No command is serve; --help alone is the whole command line's help, not serve's.
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["serve", *argv]
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        commands = {"serve": cmd_serve, "ingest": cmd_ingest, "export": cmd_export}
        commands.update(query=cli_views.cmd_query, snapshot=cli_views.cmd_snapshot)
        return commands[args.cmd](args)
    except (
        SettingsError,
        _Unreadable,
        cli_views.ViewError,
    ) as e:  # a bad RLBOARD_* variable; a folder it may not read
        return _fail(str(e))


if __name__ == "__main__":
    # Through app.py, so that the shell's module is loaded once, as `app` (see its end).
    import runpy

    runpy.run_path(str(Path(__file__).with_name("app.py")), run_name="__main__")
