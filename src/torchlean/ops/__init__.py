"""The primitive ops: importing this package registers every primitive in ``REGISTRY``.

One module per op family; each declares its primitives with ``registry.register``.
"""

# Imported for their side effect: each module registers its primitives.
from . import (  # noqa: F401
    attention,
    conv,
    elementwise,
    encoding,
    general,
    indexing,
    layout,
    linalg,
    norm,
    pool,
    random,
    reductions,
)
from .registry import ARRAY_OPS, REGISTRY, Primitive, Sample, get, register

__all__ = ["ARRAY_OPS", "REGISTRY", "Primitive", "Sample", "get", "register"]
