"""Fast kernels (TorchLean's ``Options.fastKernels``): runtime-only variants of hot kernels.

Importing this package attaches them to their primitives (``registry.attach_fast``); the
reference kernels in the op families stay the definition. Each fast kernel computes the same
function in another way and agrees with its reference within ``registry.FAST_RTOL`` (checked by
``torchlean verify`` on the samples and by the tests); they run only inside
``registry.fast_kernels(True)``, which training enters when ``Options(fast_kernels=True)``,
and in ``tl.Tensor`` code (on by default: ``registry.set_tensor_kernels``).

- ``conv``: 2-D convolutions write channels-last GEMM results (returned as (N, C, H, W) views),
  the bias fused into the forward GEMM and the kernel-gradient GEMM (a column of ones), the
  im2col matrix kept for the kernel gradient, the stride-1 input gradient as one batched GEMM
  per kernel offset added in image-row runs; other dimensions keep (N, C, ...) results and a
  batch-last col2im;
- ``pool``: max pooling keeps its input's memory layout (so a channels-last activation stays
  so for the next convolution); its VJP hands the forward's output (the window maxima) to the
  first-maximum routing instead of recomputing them, and skips the second geometry check; large
  2x2 stride-2 channels-last poolings run as compiled loops (``pool_jit``, numba, an optional
  extra loaded by the first such VJP), bit for bit the NumPy kernels;
- ``norm``: layer normalisation keeps ``xhat`` and ``rstd``, and its VJP is one fused pass
  instead of recomputing the row statistics twice;
- ``attention``: the forward keeps q, k, v and the softmax probabilities, and the VJP is one
  fused NumPy pass over them instead of recomputing the forward through primitives;
- ``recurrent``: the LSTM / RNN / GRU scans' backpropagation through time in NumPy: the gates
  of all steps recomputed at once from the saved states, then per step a few products into one
  cotangent buffer and one GEMM against ``W_hh`` (the reference rule, written with primitives,
  records about 15 kernel calls per step);
- ``softmax``: rows of at most 64 entries take their maxima over the columns of a transposed
  copy and their sums as one matrix-vector product (NumPy reduces a short contiguous axis row
  by row);
- ``linalg``: ``linear``'s forward as one BLAS GEMM with the bias as its ``C`` (SciPy's BLAS,
  ``blas``, loaded on first use; large 2-D float inputs only), faster than NumPy's matmul plus
  the bias on this machine's OpenBLAS builds;
- ``elementwise``: not fast kernels in this sense but *exact* array VJPs (tanh, relu, sigmoid,
  exp, mul, sub): the reference rules' arithmetic in one frame, the same bits, registered with
  ``autodiff.register_array_rule`` and run by the reverse driver on the array interpreter always
  (they change no rounding, so they need no block and leave compiled graphs' generated code as
  it was); and a fast ``gelu``: the tanh form as ``x sigmoid(2z)`` (one exp instead of
  NumPy's dearer float32 tanh), keeping the sigmoid for a VJP done in place on two buffers.
  And relu's forward as one compiled pass (``pool_jit.relu``, the same bits as NumPy's
  ``maximum(x, 0)``, about 3x cheaper on W3's activations) once numba is loaded.

Measured on the W3/W5 steps (CPU time per step, interleaved with PyTorch in one process) and
described in each module, with the variants that lost.

Measured and not taken (issue 26, two threads; 2-core AMD EPYC Zen 4 VM shared with other
jobs): splitting the non-BLAS kernels along the batch axis over the BLAS thread count, in a
persistent Python worker (NumPy releases the GIL inside ufuncs and copies). A hand-off to the
worker and back cost 24-30 us, and the split kernels ran slower than serial: relu of W3's first
activation (32 x 16 x 28 x 28 float32) 182-196 -> 206-424 us, of its second 80-102 -> 106-162
us, the convolution input gradient's shifted adds 330-363 -> 399-550 us (wall, best of seven).
Without any hand-off (threads started once, 200 repeats each) ``add`` / ``maximum`` /
``multiply`` on 401,408 float32 took 9.6 / 8.6 / 9.3 ms on one thread and 11.3 / 10.6 / 10.8
ms on two: these passes are memory-bound and a second core adds nothing here (``exp`` on 4M
entries, compute-bound, gained 1.4-1.9x). Also not taken: the 2-D im2col as a numba loop
(padding in the loop: 560-570 against 215-245 us on W3's second layer), the stride-1 input
gradient's accumulation as a numba loop over image rows (1,120-1,160 against 1,230-1,440 us
for the whole input gradient: within the noise).
"""

from . import (  # noqa: F401  (attach them)
    attention,
    conv,
    elementwise,
    linalg,
    norm,
    pool,
    recurrent,
    softmax,
)
