"""``tl.train``: the public door to training (``fit``, ``evaluate``, ``EpochMetrics``,
``mean_scalar_over``, ``Stepper``). The code lives in ``torchlean.training``."""

from .data import Dataset
from .training.fit import EpochMetrics, evaluate, fit, mean_scalar_over
from .training.stepper import Stepper

__all__ = ["Dataset", "EpochMetrics", "Stepper", "evaluate", "fit", "mean_scalar_over"]
