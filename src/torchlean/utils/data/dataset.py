"""``torch.utils.data.dataset``'s names, re-exported from ``torchlean.utils.data``."""

from . import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)

__all__ = ["ChainDataset", "ConcatDataset", "Dataset", "IterableDataset", "StackDataset", "Subset",
           "TensorDataset", "random_split"]
