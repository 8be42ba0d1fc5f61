"""The before / now tables of ``bench_scale.py`` runs, as RESULTS.md quotes them.

    uv run python benchmarks/scale_table.py --before A1.json A2.json --now B1.json B2.json [--pooled]

Each file is the JSON one ``bench_scale.py`` invocation printed (its figure per page: the median of its
rounds). Without ``--pooled``: per figure each invocation's figure, a side's mean of them and the ratio now /
before (the worker's RSS after the pages and the export's total time first). With ``--pooled``: the median of
every round of a side over all its files (e.g. three passes of two invocations, 18 rounds), which one slow
round or one pass's drift moves less; the highest ratios are printed last.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

SCALES = {1: "256k", 10: "2.56M"}


def _by_scale(path: Path) -> dict[int, dict]:
    return {r["scale"]: r for r in json.loads(path.read_text())["results"]}


def _label(scale: int) -> str:
    return SCALES.get(scale, f"x{scale}")


def _header(scales: list[int]) -> list[str]:
    cols = "".join(f" {_label(s)} before | now | now / before |" for s in scales)
    return ["| figure |" + cols, "|---|" + "---|---|---|" * len(scales)]


def _kinds(r: dict) -> tuple[str, ...]:
    """cold and warm, and first when the invocation measured it (``bench_scale.py --first-page``)."""
    return ("cold", "warm", "first") if "first" in r else ("cold", "warm")


def pass_table(before: list[dict], now: list[dict]) -> list[str]:
    """Per figure, each invocation's figure and the ratio of the sides' means."""
    scales = sorted(before[0])
    rows = [
        ("worker RSS after pages MB", lambda r: statistics.median(r["memory_after_pages"]["rss_mb"])),
        ("export total s", lambda r: r["export"]["total_s"]),
    ]
    for page in before[0][scales[0]]["cold"]:
        for kind in _kinds(before[0][scales[0]]):
            rows.append((f"{page} {kind} ms", lambda r, p=page, k=kind: r[k][p]["ms"]))
    out = _header(scales)
    for name, figure in rows:
        line = f"| {name} |"
        for s in scales:
            a = [figure(x[s]) for x in before if s in x]
            b = [figure(x[s]) for x in now if s in x]
            ratio = statistics.mean(b) / statistics.mean(a)
            line += (
                f" {', '.join(f'{v:g}' for v in a)} | {', '.join(f'{v:g}' for v in b)} | **{ratio:.2f}** |"
            )
        out.append(line)
    return out


def pooled_table(before: list[dict], now: list[dict]) -> list[str]:
    """Per page figure, the median of every round of a side, and the ratio; the highest ratios last."""
    scales = sorted(before[0])

    def rounds(side: list[dict], scale: int, kind: str, page: str) -> list[float]:
        return [
            x[kind][page]["ms"] for inv in side if scale in inv for x in inv[scale]["rounds"] if kind in x
        ]

    out, ratios = _header(scales), []
    for page in before[0][scales[0]]["cold"]:
        for kind in _kinds(before[0][scales[0]]):
            line = f"| {page} {kind} ms |"
            for s in scales:
                a = statistics.median(rounds(before, s, kind, page))
                b = statistics.median(rounds(now, s, kind, page))
                ratios.append((b / a, f"{page} {kind} {_label(s)}"))
                line += f" {a:.1f} | {b:.1f} | **{b / a:.2f}** |"
            out.append(line)
    n = sum(len(inv[scales[0]]["rounds"]) for inv in before)
    top = ", ".join(f"{name} {r:.2f}" for r, name in sorted(ratios, reverse=True)[:4])
    return [*out, "", f"{n} rounds a side; highest: {top}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, nargs="+", required=True)
    ap.add_argument("--now", type=Path, nargs="+", required=True)
    ap.add_argument("--pooled", action="store_true", help="the median of every round of a side")
    args = ap.parse_args(argv)
    before, now = [_by_scale(p) for p in args.before], [_by_scale(p) for p in args.now]
    print("\n".join(pooled_table(before, now) if args.pooled else pass_table(before, now)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
