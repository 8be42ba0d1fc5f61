"""The trainer's own scalars beside the rollouts: Hugging Face / TRL log histories and TensorBoard event
files found in a run's folder (:mod:`~data.trainer_logs.find`), read (:mod:`~data.trainer_logs.read`),
merged and lined up by step (:mod:`~data.trainer_logs.scalars`), and checked against the board's own
per-step means (:mod:`~data.trainer_logs.agreement`)."""

from data.trainer_logs.find import LogFile, find_logs
from data.trainer_logs.scalars import Alignment, TrainerScalars, align, aligned, read_logs, trainer_scalars

__all__ = [
    "Alignment",
    "LogFile",
    "TrainerScalars",
    "align",
    "aligned",
    "find_logs",
    "read_logs",
    "trainer_scalars",
]
