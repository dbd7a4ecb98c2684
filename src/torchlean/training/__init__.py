"""Layer 4, training: loops and the machinery around a training step (no argument parsing).

``fit`` (``fit``, ``evaluate``, ``EpochMetrics``), ``stepper`` (``Stepper``, ``ParamList``,
``ScalarTrainer``: one optimiser step of a session), ``cuda_graph`` (replaying a compiled step as
a captured CUDA graph), ``anomaly`` (naming the first non-finite value), ``distributed`` (data
parallel over MPI). The public door is ``torchlean.train``.
"""
