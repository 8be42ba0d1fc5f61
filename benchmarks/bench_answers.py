"""What writing Dash's answers costs: the pages' recorded callbacks replayed in this process, their answers
kept, then each page's answers written by Plotly's orjson engine, Plotly's json engine and
``components.answers.to_json``, interleaved, best of ``--rounds``; and whether each answer's text is Plotly's.

    uv run python benchmarks/bench_answers.py --root /work/scale/x1/root --cache C \\
        --callbacks W/x1/callbacks-<label>.json [--rounds 9]

``--cache`` as ``bench_inproc.py``'s: a cache folder of one's own holding links to the stores of a
``bench_scale.py --keep`` (its results cache is removed first). A figure's own ``to_plotly_json`` is written
with each answer, by every writer alike.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--callbacks", type=Path, required=True, help="a bench_scale.py callbacks-<label>.json")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    from benchmarks.bench_inproc import CALLBACK_PATH, app_client
    from benchmarks.bench_scale import load

    client = app_client(args.root, args.cache)
    import dash._callback

    from components import answers

    kept: list[tuple[str, object]] = []
    page = [""]
    write = dash._callback.to_json

    def keep(value):
        kept.append((page[0], value))
        return write(value)

    dash._callback.to_json = keep
    try:
        for page[0], bodies in json.loads(args.callbacks.read_text()).items():
            for body in bodies:
                client.post(CALLBACK_PATH, json=body)
    finally:
        dash._callback.to_json = write
    plotly = answers.PLOTLY_TO_JSON
    writers = {
        "plotly_orjson_ms": lambda v: plotly(v, engine="orjson"),
        "plotly_json_ms": lambda v: plotly(v, engine="json"),
        "ours_ms": answers.to_json,
    }
    pages = list(dict.fromkeys(p for p, _ in kept))
    out: dict[str, dict] = {
        p: {
            "answers": sum(q == p for q, _ in kept),
            "differ": sum(q == p and answers.to_json(v) != plotly(v, engine="orjson") for q, v in kept),
        }
        for p in pages
    }
    for _ in range(args.rounds):
        for name, fn in writers.items():
            for p in pages:
                values = [v for q, v in kept if q == p]
                t = time.perf_counter()
                for v in values:
                    fn(v)
                ms = (time.perf_counter() - t) * 1000
                out[p][name] = round(min(out[p].get(name, ms), ms), 2)
    out["all"] = {k: round(sum(o[k] for o in out.values()), 2) for k in ("answers", "differ", *writers)}
    out["load"] = load()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
