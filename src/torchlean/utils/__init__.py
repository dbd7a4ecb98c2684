"""``torchlean.utils``: torch.utils's namespace; only ``data`` (datasets and loaders) so far."""

from . import data

__all__ = ["data"]
