"""What the runs page says of a run: its files' size and freshness, what its store holds (responses, steps,
bad lines), the fields beyond the contract, and the lines that could not be used or were noted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from data import thinning
from data.cache import StoreKey, shared
from data.compare.summary import summary_row
from data.store import RunStore, run_file_stats
from data.store.reading import understood

SPARK_POINTS = 300  # at most about this many points in a run's sparkline (180 px wide): see run_headline
MAX_LISTED_ISSUES = 200  # unusable lines listed per run; the rest are counted
FIELDS_SHOWN = 20  # names listed per kind of field; the rest are counted
# One example location per kind of note: "rank0.jsonl:17 (logprobs 8, values 9)".
_EXAMPLE = pl.format("{}:{} ({})", "source", "line", pl.col("detail").fill_null("")).first()


@dataclass(frozen=True)
class RunFiles:
    """A run folder's rollout files: how many, their bytes, the newest modification time (None: no file)."""

    count: int
    size: int
    last_modified: float | None


def run_files_summary(run_dir: Path, split: str = "train") -> RunFiles:
    """:class:`RunFiles` of a run folder (of its training files, or its ``"validation"`` ones), from one
    read of the folder."""
    files = run_file_stats(run_dir, split)
    last = max((st.st_mtime for _, st in files), default=None)
    return RunFiles(len(files), sum(st.st_size for _, st in files), last)


@dataclass(frozen=True)
class RunHealth:
    """What a run's committed store holds.

    ``samples`` responses over ``steps`` steps (``step_span``: the first and last, None without steps);
    ``bad_lines`` lines not used (errors and lines still pending); ``fields``: ``(kind, names, where)``
    for the extra columns, the trainer's own per-token fields and the fields not read (``names`` a text
    listing the first :data:`FIELDS_SHOWN`); ``errors``: the first :data:`MAX_LISTED_ISSUES` unusable lines
    (``source, line, severity, reason, detail``) of ``n_errors``; ``notes``: ``(reason, lines, example)``
    per kind of data-quality note (lines kept), most frequent first, of ``n_notes`` noted lines.
    """

    samples: int
    steps: int
    step_span: tuple[int, int] | None
    bad_lines: int
    fields: list[tuple[str, str, str]]
    errors: list[dict]
    n_errors: int
    notes: list[tuple[str, int, str]]
    n_notes: int


def _names(names: list[str]) -> str:
    more = len(names) - FIELDS_SHOWN
    return ", ".join(names[:FIELDS_SHOWN]) + (f" and {more} more" if more > 0 else "")


def run_health(store: RunStore) -> RunHealth:
    """:class:`RunHealth` of a committed store (its per-step summary, manifest and issues), cached on the
    store version: the runs page shows it for every run at every visit."""
    return _health(StoreKey(store))


# The columns of the steps summary the runs page reads (:func:`summary_row` and the health's counts): a
# few of its 65, the first visit of the page reads no other.
CARD_COLUMNS = (
    "step",
    "n",
    "reward_mean",
    "kl_token_mean",
    "response_length_mean",
    "response_chars_mean",
    "n_groups",
    "zero_spread_share",
)


def card_steps(store: RunStore) -> pl.DataFrame:
    """The :data:`CARD_COLUMNS` of the store's steps summary that it has, sorted by step."""
    return store.steps_columns(CARD_COLUMNS)


@shared(16)
def _health(v: StoreKey) -> RunHealth:
    store = v.store
    steps = card_steps(store)
    manifest = store.manifest
    bad = manifest.unusable_lines + len(manifest.pending)
    span = None
    if steps.height:
        col = steps.get_column("step")
        span = (col.min(), col.max())
    kinds = [
        ("extra columns", store.extra_columns(), "in the responses table"),
        (
            "per-token fields of the trainer",
            store.token_extras(),
            "on the token page, where not longer than the response",
        ),
        ("not read", list(manifest.ignored_fields), "not a number, a text or a list of numbers"),
    ]
    fields = [(kind, _names(names), where) for kind, names, where in kinds if names]
    issues = store.issues()
    errors = issues.filter(pl.col("severity") != "note")
    noted = issues.filter(pl.col("severity") == "note")
    notes = []
    if noted.height:
        summary = (
            noted.group_by("reason")
            .agg(pl.len().alias("n"), _EXAMPLE.alias("example"))
            .sort("n", descending=True)
        )
        notes = [(r["reason"], r["n"], r["example"]) for r in summary.iter_rows(named=True)]
    return RunHealth(
        samples=int(steps.get_column("n").sum()) if steps.height else 0,
        steps=steps.height,
        step_span=span,
        bad_lines=bad,
        fields=fields,
        errors=errors.head(MAX_LISTED_ISSUES)
        .select("source", "line", "severity", "reason", "detail")
        .to_dicts(),
        n_errors=errors.height,
        notes=notes,
        n_notes=noted.height,
    )


@dataclass(frozen=True)
class Headline:
    """A run's headline figures (see :func:`data.compare.summary.summary_row`): the mean reward of its last
    step, its best step's mean reward and that step, KL per token (k3) at the last step that has one; and
    the mean reward of the steps a sparkline draws (``steps``, ``rewards``: every step, or in a run of more
    than :data:`SPARK_POINTS` steps the lowest and highest of every ``k`` and the last one, each exact)."""

    reward_last: float | None
    reward_best: float | None
    reward_best_step: int | None
    kl_last: float | None
    steps: list[int]
    rewards: list[float | None]


def run_headline(name: str, store: RunStore) -> Headline:
    """:class:`Headline` of a committed store (cached on the store version)."""
    return _headline(StoreKey(store), name)


@shared(16)
def _headline(v: StoreKey, name: str) -> Headline:
    steps = card_steps(v.store)
    row = summary_row(name, steps)
    if "reward_mean" not in steps.columns:
        return Headline(
            row["reward_last"], row["reward_best"], row["reward_best_step"], row["kl_last"], [], []
        )
    rows = spark_rows(steps.get_column("reward_mean").cast(pl.Float64).fill_null(float("nan")).to_numpy())
    kept = steps.select("step", "reward_mean")[rows]
    return Headline(
        row["reward_last"],
        row["reward_best"],
        row["reward_best_step"],
        row["kl_last"],
        kept.get_column("step").to_list(),
        kept.get_column("reward_mean").to_list(),
    )


def spark_rows(y: np.ndarray, points: int = SPARK_POINTS) -> list[int]:
    """The rows of a run's per-step values ``y`` (NaN: a gap) that its sparkline draws: every row when
    there are at most ``points``; else, of every ``k`` consecutive rows (``k`` the smallest that keeps about
    ``points``), the lowest and the highest value and the first gap (:func:`data.thinning.thin_rows`), and the
    last row. A spike or a gap of any step stays visible; every point is one step's exact value."""
    n = len(y)
    if n <= points:
        return list(range(n))
    k = -(-n // (points // 2))
    return sorted({*thinning.thin_rows(y, np.arange(n) // k), n - 1})


@dataclass(frozen=True)
class RunCard:
    """What the runs page's card of one run shows, read once for the page and its JSON answer: the run's
    committed ``store`` (None while unread) and ingest ``status``, its rollout ``files``, and from the store
    its ``health``, its ``headline`` (None without steps) and what was understood of its files."""

    name: str
    store: RunStore | None
    status: object
    files: RunFiles
    health: RunHealth | None = None
    headline: Headline | None = None
    understood: object = None


def run_card(board, scan, name: str, run_dir: Path, wait: float) -> RunCard:
    """:class:`RunCard` of run ``name`` of ``scan`` (waiting up to ``wait`` s for its first commit)."""
    store = board.store(name, wait=wait)
    files = run_files_summary(run_dir, scan.split(name))
    if store is None:
        return RunCard(name, None, board.status(name), files)
    health = run_health(store)
    head = run_headline(name, store) if health.steps else None
    return RunCard(name, store, board.status(name), files, health, head, understood(store))
