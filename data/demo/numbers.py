"""The demo's numbers: floats rounded to a few significant digits, and per-token log-probs of the
reference and of a policy drifting from it, drawn for many responses at once (vectorised).
"""

from __future__ import annotations

import numpy as np

from data.demo.text import EOS, PAD

SIG_DIGITS = 6

# --------------------------------------------------------------------------------------------------------
# Number formatting
# --------------------------------------------------------------------------------------------------------

_POW10 = np.array([float(10**k) for k in range(23)])


def round_sig(values, sig: int = SIG_DIGITS) -> np.ndarray:
    """Round to ``sig`` significant digits, vectorised; returns a new float64 array (``-0.0`` becomes
    ``0.0``; NaN and ±inf pass through; magnitudes below ~1e-17 keep fewer digits).

    The result is the double nearest to a decimal with at most ``sig`` digits, so JSON writers that print the
    shortest round-trip representation (orjson, ``repr``) print at most ``sig`` digits.
    """
    a = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.log10(np.abs(a))
    np.floor(k, out=k)
    np.subtract(sig - 1, k, out=k)
    k[~np.isfinite(k)] = 0.0  # 0, NaN, ±inf: scale 1, rounding leaves them as they are
    ki = k.astype(np.int64)
    if ki.size and ki.min() < 0:  # |x| >= 10**sig: divide by an exact power of ten instead
        big = ki < 0
        out = _round_scaled(a, np.clip(ki, 0, 22))
        down = _POW10[np.clip(-ki[big], 0, 22)]
        out[big] = np.round(a[big] / down) * down + 0.0
        return out
    return _round_scaled(a, np.minimum(ki, 22, out=ki))


def _round_scaled(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    p = _POW10[k]
    out = a * p
    np.round(out, out=out)
    out /= p
    out += 0.0
    return out


# --------------------------------------------------------------------------------------------------------
# Token-level numbers
# --------------------------------------------------------------------------------------------------------


_TOKEN_CLASS: dict[str, int] = {}


def _token_class(tok: str) -> int:
    """0 = word with a leading space/newline glyph, 1 = bare letters, 2 = other, 3 = special token."""
    if tok in (EOS, PAD):
        return 3
    bare = tok.lstrip("ĠĊĉ")
    if bare.isalpha():
        return 1 if bare == tok else 0
    return 2


def token_kinds(tokens: list[str], starts: np.ndarray) -> np.ndarray:
    """Per token of a flat list of several responses (``starts`` = index of each response's first token):
    0 = word start, 1 = sub-word continuation, 2 = punctuation / whitespace / digits, 3 = special."""
    cache = _TOKEN_CLASS
    cls = np.fromiter(
        (cache[t] if t in cache else cache.setdefault(t, _token_class(t)) for t in tokens),
        dtype=np.int8,
        count=len(tokens),
    )
    prev_alpha = np.zeros(len(cls), dtype=bool)
    prev_alpha[1:] = cls[:-1] <= 1
    prev_alpha[starts] = False
    return np.where((cls == 1) & ~prev_alpha, 0, cls).astype(np.int8)


def ref_logprobs(rng: np.random.Generator, kinds: np.ndarray) -> np.ndarray:
    """Reference-model log-probs: most tokens in -0.1..-3, sub-word continuations near 0, a few rare
    words down to -14."""
    n = len(kinds)
    word = -rng.gamma(1.4, 1.1, n)
    word = np.where(rng.random(n) < 0.04, -rng.uniform(5.0, 14.0, n), word)
    cont = -rng.gamma(1.0, 0.05, n)
    punct = -rng.gamma(1.2, 0.45, n)
    special = -rng.gamma(1.0, 0.2, n)
    out = np.select([kinds == 0, kinds == 1, kinds == 2], [word, cont, punct], special)
    return np.clip(out, -14.0, -1e-6)


def policy_logprobs(rng: np.random.Generator, ref: np.ndarray, progress: float) -> np.ndarray:
    """The policy grows more confident in its own samples: logprob ≥ ref_logprob for most tokens."""
    n = len(ref)
    drift = 0.25 * progress**1.2
    sharper = ref * np.exp(-drift * rng.lognormal(0.0, 0.6, n))
    flatter = ref * (1.0 + drift * rng.uniform(0.0, 0.6, n))
    out = np.where(rng.random(n) < 0.12, flatter, sharper)
    out = out * (1.0 + rng.normal(0.0, 1e-6, n))  # generation vs forward-pass noise (TRL: up to ~3e-6)
    return np.clip(out, -14.0, -1e-6)


def segment_ids(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For segments of the given lengths laid end to end: start offsets, segment id and position in the
    segment of every element."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    seg = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(int(lengths.sum())) - starts[seg]
    return starts, seg, pos
