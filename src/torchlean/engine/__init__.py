"""Layer 2, the interpreters: the ways a program over the registry's primitives runs.

``ops_interface`` is TorchLean's Ops interface (``F``: one user function runs on every owner),
``tape`` the eager autograd tape, ``graph`` the compiled SSA graph and its backprop, ``transforms``
the functional transforms (grad, vjp, jvp, hvp, hessian) and ``Compiled``/``CompiledModule``,
``tensor`` the PyTorch-shaped ``Tensor``, ``session`` the seed's Torch session (recording only),
``params`` the parameters that live across steps. Imports only ``core`` and ``ops``.
"""
