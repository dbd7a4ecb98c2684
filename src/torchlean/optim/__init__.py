"""``tl.optim``: torch.optim's optimisers (``optimizers``, and the less common ones in
``more_optimizers``) and learning-rate schedules (``lr_scheduler``, importable as
``torchlean.optim.lr_scheduler`` as in torch). This file only re-exports."""

from . import lr_scheduler
from .more_optimizers import ASGD, Adafactor, Adamax, Muon, NAdam, RAdam, Rprop, SparseAdam
from .optimizers import (
    LBFGS,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    AdamW,
    Optimizer,
    OptimizerError,
    ParamGroup,
    RMSprop,
)

__all__ = [
    "ASGD", "LBFGS", "SGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "Muon",
    "NAdam", "Optimizer", "OptimizerError", "ParamGroup", "RAdam", "RMSprop", "Rprop",
    "SparseAdam", "lr_scheduler",
]
