"""``torch.utils.data.dataloader``'s names, re-exported from ``torchlean.utils.data``."""

from . import DataLoader, default_collate, default_convert, get_worker_info

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]
