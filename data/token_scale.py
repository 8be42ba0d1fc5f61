"""The token strip's colour scale against one extreme token: the run's 99.9th percentile of each per-token
metric (of |value| for a signed one), from the token arrays of its responses, or of a sample of them spread
over the run (whole row groups of its parts, evenly spaced) beyond :data:`SAMPLE_ROWS`; computed by the
commit that ends an ingest pass and kept in the store (:mod:`data.derived.tokscale`), else once per committed
state (cached on its version). The strip clips its scale there and its legend says so; the
median beside it is where a log scale turns from linear (:mod:`data.strip_scale`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl
import pyarrow.parquet as pq

from data.cache import StoreKey, shared
from data.metrics import label
from data.metrics.token import INFERENCE_LOGPROB_FIELDS, TOKEN_COLUMNS, explode_tokens, token_metrics
from data.token_frames import MIN_SCALE, metric_signed

QUANTILE = 0.999
# The metrics whose scale is clipped: those without natural bounds (a probability's scale is 0 to 1).
CLIPPED = ("kl", "log_ratio", "token_reward", "value", "value_error", "infer_gap", "mismatch_kl")
# Responses read at most: every response of a smaller run (its quantile exact); a larger one is sampled by
# whole row groups (one read each) spread evenly over its parts. At 2.56M responses of 60 tokens, 4,096
# responses are ~250,000 tokens: the 99.9th percentile is then the 250th largest value.
SAMPLE_ROWS = 4096


@dataclass(frozen=True)
class RunScale:
    """``values``: metric -> its run-level quantile (``QUANTILE`` of |v| for a signed metric), over the
    finite values of ``tokens`` positions of ``responses`` responses, of the run's ``total``; ``exact``:
    every response was read (no sample); ``medians``: ``(metric, median |v|)`` over the same values, where
    a log scale turns from linear (:mod:`data.strip_scale`)."""

    values: dict[str, float]
    tokens: int
    responses: int
    total: int
    exact: bool
    medians: tuple[tuple[str, float], ...] = ()

    def of(self, metric: str | None) -> float | None:
        return self.values.get(metric) if metric else None

    def knee(self, metric: str | None) -> float | None:
        """The run's median |value| of ``metric`` (None when unknown)."""
        return dict(self.medians).get(metric) if metric else None

    def source(self) -> str:
        """Where the quantile comes from, in words."""
        pct = f"{QUANTILE * 100:g}th percentile"
        if self.exact:
            return f"the run's {pct} ({self.tokens:,} tokens)"
        return f"the {pct} of {self.tokens:,} tokens of {self.responses:,} responses spread over the run's {self.total:,}"


def clipped_scale(
    metric: str, lo: float, hi: float, run: RunScale | None
) -> tuple[float, float, float | None]:
    """``(lo, hi, peak)``: the strip's scale ``lo..hi`` (``data.token_frames.scale_range`` of the response)
    clipped at the run's quantile of ``metric`` when the response goes past it, with the response's largest
    value ``peak`` (None when not clipped). Never narrower than the metric's ``MIN_SCALE``."""
    q = run.of(metric) if run is not None and metric in CLIPPED else None
    if q is None or not math.isfinite(q) or q <= 0:
        return lo, hi, None
    q = max(q, MIN_SCALE.get(metric, 0.0))
    if hi <= q:
        return lo, hi, None
    return (-q if metric_signed(metric) else lo), q, hi


def legend_note(metric: str, q: float, peak: float, run: RunScale) -> str:
    """The legend's hover text: why the scale stops where it does."""
    what = f"|{label(metric)}|" if metric_signed(metric) else label(metric)
    return (
        f"Colours are clipped at {what} = {q:.4g}, {run.source()}: this response goes to {peak:.4g}, and a "
        "scale to its largest token would wash out every other one. Hover a token for its value."
    )


# The derived kind that keeps a commit's scale (data.derived.registry), its manifest key.
KIND = "tokscale"


def run_scale(store) -> RunScale:
    """The :class:`RunScale` of the store's committed state: the one its commit kept
    (:mod:`data.derived.tokscale`), else (a commit made mid-read keeps none) computed once per state."""
    name = store.manifest.derived_name(KIND)
    if name:
        try:
            kept = from_json((Path(store.dir) / name).read_bytes())
        except FileNotFoundError:  # a later commit collected it: that state's is computed
            kept = None
        if kept is not None:
            return kept
    return _computed_scale(StoreKey(store))


def to_json(scale: RunScale) -> bytes:
    """The JSON object of ``scale`` (what :func:`from_json` reads)."""
    return orjson.dumps(
        {
            "values": scale.values,
            "medians": [list(m) for m in scale.medians],
            **{k: getattr(scale, k) for k in ("tokens", "responses", "total", "exact")},
        }
    )


def from_json(raw: bytes) -> RunScale | None:
    """The :class:`RunScale` :func:`to_json` wrote; None for anything else (computed instead)."""
    try:
        d = orjson.loads(raw)
        values = {str(k): float(v) for k, v in d["values"].items()}
        medians = tuple((str(m), float(v)) for m, v in d["medians"])
        counts = [d[k] for k in ("tokens", "responses", "total")]
        if not all(type(n) is int for n in counts) or type(d["exact"]) is not bool:
            return None
        return RunScale(values, *counts, d["exact"], medians)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _groups_of(path) -> list[tuple[str, int, int]]:
    md = pq.ParquetFile(path).metadata
    return [(str(path), i, md.row_group(i).num_rows) for i in range(md.num_row_groups)]


def _pick(files: list, total: int, want: int) -> list[tuple[str, int, int]]:
    """``(file, row group, rows)`` to read: every row group of ``files`` when the run's ``total`` responses
    are at most ``want``; else row groups spread evenly over the files (the middle ones of files evenly
    spaced, several a file when there are few files), as many as hold ``want`` rows at the first file's
    row-group size: only the footers of the files read are opened (600 at 2.56M responses)."""
    if total <= want or not files:
        return [g for f in files for g in _groups_of(f)]
    first = _groups_of(files[0])
    per_group = max(1, first[0][2]) if first else 1
    k = max(1, math.ceil(want / per_group))
    n_files = min(k, len(files))
    per_file = math.ceil(k / n_files)
    out = []
    for f in (files[int(i * len(files) / n_files)] for i in range(n_files)):
        groups = _groups_of(f)
        m = min(per_file, len(groups))
        out += [groups[int((j + 0.5) * len(groups) / m)] for j in range(m)] if m else []
    return out


# Named anew when RunScale gains a field: the results cache keys an entry by the function's name, and an
# entry an older board stored would come back without it (its default), unseen.
@shared(16)
def _computed_scale(key: StoreKey) -> RunScale:
    return compute(key.store)


def compute(store) -> RunScale:
    """The :class:`RunScale` of ``store`` (a committed state, or the one a commit is about to make) from its
    parts: the token strings are not read (no quantile needs them), every quantile is one select."""
    files = store.part_files()
    total = _shown(store)
    picked = _pick(files, total, SAMPLE_ROWS)
    names = set(store.schema()) | _list_columns(picked)
    lists = [c for c in TOKEN_COLUMNS if c in names and c != "response_tokens"]
    extras = [f for f in INFERENCE_LOGPROB_FIELDS if f in names][:1]
    exact = total <= SAMPLE_ROWS
    if not lists:
        return RunScale({}, 0, 0, total, exact)
    keep = set(store.part_ids()) if store.shares_files() else None
    below = store.visible_below
    frames = []
    for path, i, _ in picked:
        pf = pq.ParquetFile(path)
        have = set(pf.schema_arrow.names)
        cols = [c for c in [*lists, *extras, "part", "step"] if c in have]
        df = pl.from_arrow(pf.read_row_group(i, columns=cols))
        if keep is not None and "part" in df.columns:
            df = df.filter(pl.col("part").is_in(list(keep)))
        if below is not None and "step" in df.columns:
            df = df.filter(pl.col("step") < below)
        frames.append(df.select(c for c in [*lists, *extras] if c in df.columns))
    sample = pl.concat(frames, how="diagonal_relaxed").with_row_index("row") if frames else None
    if sample is None or sample.height == 0:
        return RunScale({}, 0, 0, total, exact)
    long = token_metrics(explode_tokens(sample, (), [e for e in extras if e in sample.columns]))
    metrics = [m for m in CLIPPED if m in long.columns]
    exprs = []
    for m in metrics:
        v = pl.col(m).cast(pl.Float64)
        v = v.abs() if metric_signed(m) else v
        v = v.filter(v.is_finite())
        exprs += [v.quantile(QUANTILE, "higher").alias(f"q{m}"), v.quantile(0.5, "higher").alias(f"m{m}")]
    got = long.select(exprs).row(0, named=True) if exprs else {}
    values, medians = {}, []
    for m in metrics:
        if got[f"q{m}"] is not None:
            values[m] = float(got[f"q{m}"])
            medians.append((m, float(got[f"m{m}"])))
    return RunScale(values, long.height, sample.height, _shown(store), exact, tuple(medians))


def _shown(store) -> int:
    """The responses the pages show (the steps summary's counts)."""
    n = store.steps_columns(["n"])
    return int(n.get_column("n").sum()) if "n" in n.columns else 0


def _list_columns(picked) -> set[str]:
    """The columns of the picked row groups' files (a run's first parts may lack a field later ones have)."""
    names: set[str] = set()
    for path in dict.fromkeys(p for p, _, _ in picked):
        names |= set(pq.ParquetFile(path).schema_arrow.names)
    return names
