"""Layer 0, the core: what every other layer stands on and that stands on nothing of torchlean's.

``errors`` (the exceptions), ``shape`` (shape arithmetic), ``backend`` (array namespaces, dtypes,
the host/device seam), ``registry`` (one ``Primitive`` record per op) and ``attr_kinds`` (what a
primitive's static attributes may be), ``autodiff`` (the one reverse driver and forward-tangent
driver), ``rng`` (counter-based random sources), ``safe_files`` (opening and replacing files
safely) and ``alloc`` (opt-in malloc tuning). Nothing here imports a higher layer.
"""
