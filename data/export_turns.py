"""How a served export shares its worker with the pages: one export at a time makes a batch, and each rests
while a page's request is being answered (see :data:`EXPORT_REST`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

# A served export shares its worker with the pages (three full exports of a 1M-response run took the pages'
# p95 from 159 to 890 ms, issue 33 row 15), so it runs at a lower priority: in one process one export at a
# time makes its next batch (the others wait their turn, holding no CPU), and after a batch that ends while
# a page's request is being answered (PAGES) it rests EXPORT_REST times as long as the batch took (at most
# MAX_REST seconds). Pages never wait for a turn. A worker so spends at most 1 / (1 + EXPORT_REST) of a core
# on exports while it serves pages, however many exports; with no page to serve an export runs unpaced (a
# rest with nothing to give way to made an export of every step of 256k responses 1.5x as long).
EXPORT_REST = 1.0
MAX_REST = 0.5
_TURN = threading.Lock()


class InFlight:
    """How many requests of a kind this process is answering now (a counter its threads share)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0

    def __enter__(self) -> InFlight:
        with self._lock:
            self._n += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._n -= 1

    def busy(self) -> bool:
        return self._n > 0


# The pages' requests (their callbacks, counted by routes.guard_callbacks) in this process: what an export
# gives way to. One per process, as _TURN: a count of work under way, not anyone's data.
PAGES = InFlight()


def taking_turns(
    chunks: Iterator[bytes], rest: float = EXPORT_REST, pages: InFlight = PAGES
) -> Iterator[bytes]:
    """``chunks``, each made while holding this process's export turn (one export at a time makes a
    batch), with a rest of ``rest`` times as long as it took after each that ends while ``pages`` are being
    answered (see :data:`EXPORT_REST`)."""
    try:
        while True:
            with _TURN:
                started = time.monotonic()
                chunk = next(chunks, None)
                took = time.monotonic() - started
            if chunk is None:
                return
            yield chunk
            if pages.busy():
                time.sleep(min(took * rest, MAX_REST))
    finally:
        chunks.close()
