"""Smoothing a curve exactly as TensorBoard does (its "classic" smoothing, which W&B's default EMA also
follows): an exponential moving average with debiasing.

For weight ``w`` in [0, 1) and the series' finite values ``y_1, y_2, …`` in step order::

    last_0 = 0;   last_n = w · last_(n−1) + (1 − w) · y_n;   smoothed_n = last_n / (1 − w^n)

where ``n`` counts finite values only; a non-finite value (a gap) is passed through unchanged and does
not advance ``n``. A constant series is returned as it is. The division by ``1 − w^n`` removes the
pull towards the starting 0 (so ``smoothed_1 = y_1``). Source: ``classicSmoothing`` in tensorflow/
tensorboard, ``tensorboard/webapp/widgets/line_chart_v2/data_transformer.ts``.
"""

from __future__ import annotations

import math

import numpy as np

# TensorBoard's slider stops at 0.999 (a weight of 1 would freeze the line at 0 / 0).
MAX_WEIGHT = 0.999


def ema(values, weight: float) -> np.ndarray:
    """The smoothed series (float64, same length as ``values``; None / NaN / ±inf pass through as NaN
    when None, else unchanged). ``weight`` 0 returns the values as they are."""
    y = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    w = float(weight)
    if not 0 <= w <= MAX_WEIGHT:
        raise ValueError(f"smoothing weight {weight!r} is not in [0, {MAX_WEIGHT}]")
    if y.size == 0 or w == 0:
        return y
    finite = np.isfinite(y)
    if finite.all() and (y == y[0]).all():
        return y
    out = y.copy()
    last = 0.0
    n = 0
    for i, v in enumerate(y):
        if not math.isfinite(v):
            continue
        last = last * w + (1 - w) * v
        n += 1
        out[i] = last / (1 - w**n)
    return out
