"""The primitive ops: importing this package registers every primitive in ``REGISTRY``.

One module per op family; each declares its primitives with ``registry.register``. Shared by
them: ``samples`` (sample-input generators) and ``windows`` (strided windows for conv and pool).
"""

from ..core.registry import ARRAY_OPS, REGISTRY, ErrorInput, Primitive, Sample, get, register

# Imported for their side effect: each module registers its primitives.
from . import (  # noqa: F401
    attention,
    conv,
    elementwise,
    embedding,
    encoding,
    fast,  # noqa: F401,E402  (attaches the fast kernels to the primitives above)
    general,
    indexing,
    layout,
    linalg,
    norm,
    pool,
    random,
    recurrent,
    reductions,
    take,
)

__all__ = ["ARRAY_OPS", "REGISTRY", "ErrorInput", "Primitive", "Sample", "get", "register"]
