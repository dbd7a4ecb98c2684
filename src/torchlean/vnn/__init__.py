"""VNN-LIB verification: read a property, decide it for an ONNX network, run a benchmark.

``vnnlib.read`` turns a ``.vnnlib`` (or ``.vnnlib.gz``) file into a ``bounds.properties.Property``;
``instance.verify_instance(model, property, timeout, method)`` answers ``unsat`` (a bound pass
refutes every unsafe disjunct), ``sat`` (a counterexample found by sampling and PGD, accepted only
after the network maps it into the unsafe set), ``unknown`` or ``timeout``; ``benchmark`` runs an
``instances.csv``. This package sits above ``bounds``, ``attack`` and ``onnx`` (layer 5), which it
joins; the ``torchlean vnn`` command is its command-line face.
"""
