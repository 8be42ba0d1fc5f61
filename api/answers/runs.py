"""The runs page's answer: one row per run under the root (what its card shows: files, progress, what was
read and how, its headline figures and the reward sparkline's points), its sparkline figure by the card's
id, and the page's notices (a root it cannot read, folders it skipped)."""

from __future__ import annotations

import time

from api.answer import Answer, Table
from api.registry import store_info
from components.compare_figures import sparkline
from components.theme import colour
from data.runs_overview import run_card
from data.service import board
from data.views import links, paths

PATH, NAME = paths.RUNS, "runs"
# As the page: small runs are ready within the first answer, bigger ones are "reading" (ask again).
FIRST_ANSWER_SECONDS = 5.0
COLUMNS = ("run", "state", "progress", "files", "bytes", "last_modified", "responses", "steps", "first_step",
           "last_step", "bad_lines", "reward_last", "reward_best", "reward_best_step", "kl_last", "read_as",
           "notes", "not_read", "errors", "links")  # fmt: skip
LABELS = {
    "reward_last": "reward, last step",
    "reward_best": "best",
    "kl_last": "KL per token (k3), last step",
}


def answer(query: dict[str, list[str]]) -> Answer:
    b = board()
    scan = b.scan()
    notices = []
    if scan.problem is not None:
        notices.append(f"{scan.problem.headline}: {scan.problem.detail}")
    if scan.unreadable:
        notices.append(f"{len(scan.unreadable)} folder(s) under {scan.root} could not be read.")
    if scan.outside:
        notices.append(
            f"{len(scan.outside)} folder(s) under {scan.root} are links out of the root: not read."
        )
    if scan.skipped:
        n = len(scan.skipped)
        notices.append(f"{n} {'entry' if n == 1 else 'entries'} under {scan.root} skipped.")
    rows, figures = [], {}
    deadline = time.monotonic() + FIRST_ANSWER_SECONDS
    for name, run_dir in scan.runs.items():
        card = run_card(b, scan, name, run_dir, max(0.0, deadline - time.monotonic()))
        status, files, health = card.status, card.files, card.health
        row = dict.fromkeys(COLUMNS)
        row.update(
            run=name,
            state="failed" if status.error else ("reading" if status.running else "ready"),
            progress=status.fraction if status.running and status.total else None,
            files=files.count,
            bytes=files.size,
            last_modified=files.last_modified,
            links={k: links.run_page(p, name) for k, p in
                   (("reward", paths.REWARD), ("responses", paths.RESPONSES), ("prompts", paths.PROMPTS))},
        )  # fmt: skip
        if status.error:
            row["errors"] = [status.error]
        if card.store is not None:
            u = card.understood
            row.update(
                responses=health.samples,
                steps=health.steps,
                first_step=health.step_span[0] if health.step_span else None,
                last_step=health.step_span[1] if health.step_span else None,
                bad_lines=health.bad_lines,
                read_as=[f"{t}: {x}" for t, x in u.read_as],
                notes=[*u.mapping, *u.notes],
                not_read=list(u.not_read),
                errors=[
                    *(row["errors"] or []),
                    *(f"{e['source']}:{e['line']}: {e['reason']}" for e in health.errors),
                ],
            )
            if (h := card.headline) is not None:
                row.update(reward_last=h.reward_last, reward_best=h.reward_best,
                           reward_best_step=h.reward_best_step, kl_last=h.kl_last)  # fmt: skip
                figures[f"runs-spark-{name}"] = sparkline(h.steps, h.rewards, color=colour("reward"))
        rows.append(row)
    table = Table(list(COLUMNS), rows, LABELS)
    return Answer(
        PATH,
        {"root": str(b.root)},
        figures=figures,
        titles={k: f"mean reward per step of {k.removeprefix('runs-spark-')}" for k in figures},
        tables={"runs-table": table},
        main="runs-table",
        notices=notices,
        store={r["run"]: store_info(b.store(r["run"], wait=0)) for r in rows},
    )
