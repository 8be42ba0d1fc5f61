"""Comparing runs: curves of several runs on one axis (:mod:`~data.compare.curves`, smoothed as
TensorBoard does: :mod:`~data.compare.smoothing`), their reward distributions on shared bins
(:mod:`~data.compare.distribution`), a summary table (:mod:`~data.compare.summary`), the same prompt
answered by two runs (:mod:`~data.compare.prompts`), and the trainer's scalars beside them
(:mod:`~data.compare.trainer`). What cannot be compared comes back as :class:`~data.compare.notes.Note`s."""
