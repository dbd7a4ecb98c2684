"""``torch.utils.data.dataset``'s names (``from torch.utils.data.dataset import random_split``),
re-exported from ``torchlean.utils.data``."""

from . import ConcatDataset, Dataset, Subset, TensorDataset, random_split

__all__ = ["ConcatDataset", "Dataset", "Subset", "TensorDataset", "random_split"]
