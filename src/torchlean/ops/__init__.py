"""The primitive ops: importing this package registers every primitive in ``REGISTRY``.

One module per op family; each declares its primitives with ``registry.register``.
"""

from . import elementwise, layout, reductions  # noqa: F401  (registration side effects)
from .registry import ARRAY_OPS, REGISTRY, Primitive, Sample, get, register

__all__ = ["ARRAY_OPS", "REGISTRY", "Primitive", "Sample", "get", "register"]
