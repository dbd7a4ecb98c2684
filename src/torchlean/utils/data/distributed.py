"""``torch.utils.data.distributed``'s name, re-exported from ``torchlean.utils.data``."""

from . import DistributedSampler

__all__ = ["DistributedSampler"]
