"""``tl.optim``: torch.optim's optimisers (``optimizers``) and learning-rate schedules
(``lr_scheduler``, importable as ``torchlean.optim.lr_scheduler`` as in torch). This file only
re-exports."""

from . import lr_scheduler
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
    "LBFGS", "SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Optimizer", "OptimizerError",
    "ParamGroup", "RMSprop", "lr_scheduler",
]
