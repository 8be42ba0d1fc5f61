"""What every fuzz test shares: its budget (short in the test command, long by ``RLBOARD_FUZZ_EXAMPLES``),
the memory bound each example is held to, the read limits it runs under, and strategies for JSON values.

The short budget is derandomized and keeps no example database, so that CI runs the same examples every
time; ``RLBOARD_FUZZ_EXAMPLES=N`` runs N fresh random examples per test instead (benchmarks/README.md)."""

from __future__ import annotations

import contextlib
import os
import tracemalloc

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

LONG = os.environ.get(
    "RLBOARD_FUZZ_EXAMPLES"
)  # tests read the environment directly: data/config is the app's


def budget(short: int) -> settings:
    """Hypothesis settings of ``short`` examples (derandomized, no database), or of the long budget."""
    return settings(
        max_examples=int(LONG) if LONG else short,
        derandomize=not LONG,
        database=None,
        deadline=None,
        print_blob=True,
        # A failure is shrunk only in the long budget (shrinking a slow example can take minutes); the short
        # one reports the example as found, with the blob to shrink it again by hand.
        phases=tuple(Phase) if LONG else tuple(p for p in Phase if p is not Phase.shrink),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# The read limits every fuzzed file is read under (small, so that a limit is reached by small examples).
LIMITS = {
    "RLBOARD_MAX_LINE_BYTES": "4096",
    "RLBOARD_MAX_INFLATED_BYTES": str(256 << 10),
    "RLBOARD_MAX_PARQUET_BYTES": str(1 << 20),
}
# Peak memory an example may add beyond what its input and the limits explain: Polars' and Arrow's frames of
# a few rows, a store's metadata, the allocators' slack, another thread of the test process (the peak is the
# process's). Well below what a reader holding a whole 64 MB bomb (test_fuzz005) takes.
BASE_BYTES = 48 << 20


@contextlib.contextmanager
def read_limits(**extra: str):
    """The environment of :data:`LIMITS` (and ``extra``) for the time of one example."""
    keys = {**LIMITS, **extra}
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith(key))


def peak_bytes(fn, *args, **kwargs):
    """``(fn's result, how far the process's peak resident memory rose above its resident memory at the
    start while fn ran)``: Linux's peak (VmHWM) reset first by ``/proc/self/clear_refs``, so Polars', Arrow's
    and the decompressors' own memory counts too. Where that cannot be reset, Python's own allocations
    (tracemalloc) instead. A reader's first call imports and starts pools: warm it up before (see
    :func:`warm`)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        tracemalloc.start()
        try:
            out = fn(*args, **kwargs)
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    start = _status("VmRSS:")
    out = fn(*args, **kwargs)
    return out, _status("VmHWM:") - start


def assert_bounded(peak: int, bound: int, what: str) -> None:
    assert peak <= bound, f"{what}: peak {peak:,} bytes, over the bound of {bound:,}"


# JSON values: every type, odd numbers (huge, negative zero, beyond 64 bits), odd text (non-BMP, NUL,
# quotes, backslashes, lone surrogates as escapes cannot be made by json.dumps: raw lines cover them).
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), 2**64]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e40, -1e308, 1.7e308, 5e-324, -0.0]),
    st.text(max_size=20),
    st.sampled_from(["", "<pad>", '"', "\\", '":', "<script>", "\u2028", "\U0001f600", "NaN", "step"]),
)


def json_values(keys: st.SearchStrategy[str], max_leaves: int = 12) -> st.SearchStrategy:
    """Nested JSON values (lists and objects with keys drawn from ``keys``)."""
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.lists(st.floats(allow_nan=False, width=32), max_size=6),
            st.dictionaries(keys, inner, max_size=5),
        ),
        max_leaves=max_leaves,
    )
