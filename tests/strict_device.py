"""A strict stand-in for the CUDA device, used only in tests (CI has no GPU).

``StrictArray`` wraps a NumPy array and behaves like a CuPy array where kernels can tell: it
refuses every implicit conversion to host data (``__array__``, ``float()``, ``int()``,
``bool()``, iteration, ``.item()``, ``.tolist()``, NumPy functions and ufuncs applied to it, and
mixing it with a NumPy array in an operator or index, and indexing with a boolean device mask,
whose true count CuPy reads back to the host), and returns 0-d arrays from reductions,
as CuPy does. ``StrictNamespace`` is its array module: the functions CuPy and NumPy share (the
list below was taken from CuPy 14.2), run on NumPy, plus CuPy's ``asnumpy``; ``asarray`` of host
data is the one upload and ``asnumpy``/``.get()`` the one download, and both are counted.

So a device-mode test passes only if the library moves data explicitly (``backend.to_device``,
``backend.to_host``) and calls kernels through the namespace, never NumPy directly. Use it with
``strict_cuda()``, which makes ``Options(device="cuda")`` mean this device for the block.
"""

from __future__ import annotations

import contextlib
import operator
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from torchlean.core.backend import cuda_namespace_override


class ImplicitTransferError(TypeError):
    """A device array was about to be read as host data without an explicit transfer."""


# Functions that CuPy 14.2 and NumPy both provide (``dir(cupy)`` intersected with NumPy's
# callables): the namespace offers exactly these, so a kernel that passes here names nothing
# CuPy lacks. ``test_device.py`` checks the list against CuPy itself when CuPy is installed.
CUPY_FUNCTIONS = """
abs absolute acos acosh add all allclose amax amin angle any append apply_along_axis arange
arccos arccosh arcsin arcsinh arctan arctan2 arctanh argmax argmin argpartition argsort argwhere
around array_equal array_equiv asanyarray ascontiguousarray asfortranarray asin asinh astype
atan atan2 atanh atleast_1d atleast_2d atleast_3d average bincount bitwise_and bitwise_count
bitwise_invert bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift bitwise_xor
broadcast_arrays broadcast_shapes broadcast_to can_cast cbrt ceil choose clip column_stack
common_type compress concat concatenate conj conjugate convolve copy copysign copyto corrcoef
correlate cos cosh count_nonzero cov cross cumprod cumsum cumulative_prod cumulative_sum
deg2rad degrees delete diag diag_indices diag_indices_from diagflat diagonal diff digitize divide
divmod dot dsplit dstack ediff1d einsum empty empty_like equal exp exp2 expand_dims expm1 extract
eye fabs fill_diagonal fix flatnonzero flip fliplr flipud float_power floor floor_divide fmax fmin
fmod frexp full full_like gcd gradient greater greater_equal heaviside hsplit hstack hypot i0
identity imag indices inner interp intersect1d invert isclose isdtype isfinite isin isinf isnan
isneginf isposinf isreal isscalar issubdtype ix_ kron lcm ldexp left_shift less less_equal lexsort
linspace log log10 log1p log2 logaddexp logaddexp2 logical_and logical_not logical_or logical_xor
logspace matmul matrix_transpose max maximum may_share_memory mean median meshgrid min
min_scalar_type minimum mod modf moveaxis multiply nan_to_num nanargmax nanargmin nancumprod
nancumsum nanmax nanmean nanmedian nanmin nanprod nanstd nansum nanvar ndim negative nextafter
nonzero not_equal ones ones_like outer packbits pad partition percentile permute_dims place
positive pow power prod promote_types ptp put put_along_axis putmask quantile rad2deg radians
ravel ravel_multi_index real reciprocal remainder repeat require reshape resize result_type
right_shift rint roll rollaxis rot90 round searchsorted select shape shares_memory sign signbit
sin sinc sinh size sort split sqrt square squeeze stack std subtract sum swapaxes take
take_along_axis tan tanh tensordot tile trace transpose trapezoid tri tril tril_indices
tril_indices_from triu triu_indices triu_indices_from true_divide trunc union1d unique
unravel_index unwrap var vdot vsplit vstack where zeros zeros_like
""".split()

# Constants, dtypes and scalar types CuPy re-exports from NumPy.
_PASSTHROUGH = """
bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 intp uintp
dtype finfo iinfo newaxis inf nan pi e integer floating signedinteger unsignedinteger number
generic
""".split()


class TransferLog:
    """Counts of explicit transfers (``uploads``, ``downloads``) and their shapes."""

    def __init__(self) -> None:
        self.uploads = 0
        self.downloads = 0
        self.upload_shapes: Counter[tuple[int, ...]] = Counter()

    def __repr__(self) -> str:
        return f"TransferLog(uploads={self.uploads}, downloads={self.downloads})"


def _refuse(what: str) -> ImplicitTransferError:
    return ImplicitTransferError(f"strict device: {what} would copy a device array to the host "
                                 "implicitly; use torchlean.backend.to_host")


def _unwrap(x: Any) -> Any:
    """Device arrays become their NumPy arrays; host arrays are refused (CuPy refuses them too);
    containers are unwrapped element by element; everything else passes."""
    if type(x) is StrictArray:
        return x._a
    if isinstance(x, np.ndarray):
        raise ImplicitTransferError(
            f"strict device: a host NumPy array {x.shape} {x.dtype} was mixed with device "
            "arrays; upload it with torchlean.backend.to_device")
    if type(x) is tuple:
        return tuple(_unwrap(e) for e in x)
    if type(x) is list:
        return [_unwrap(e) for e in x]
    if type(x) is slice:
        return slice(_unwrap(x.start), _unwrap(x.stop), _unwrap(x.step))
    return x


def _wrap(x: Any) -> Any:
    """NumPy results become device arrays (scalars as 0-d arrays, as CuPy returns them)."""
    if isinstance(x, np.ndarray):
        return StrictArray(x)
    if isinstance(x, np.generic) and not isinstance(x, np.dtype):
        return StrictArray(np.asarray(x))
    if type(x) is tuple:
        return tuple(_wrap(e) for e in x)
    if type(x) is list:
        return [_wrap(e) for e in x]
    return x


def _index(key: Any) -> Any:
    """An index of a device array, unwrapped. A boolean device array in it is refused: CuPy
    reads the mask's true count back to the host to size the result (a synchronisation and a
    device-to-host copy, which also fails a CUDA graph capture); index with integer positions."""
    for entry in key if type(key) is tuple else (key,):
        if type(entry) is StrictArray and entry.dtype == np.bool_:
            raise _refuse("indexing with a boolean device mask (CuPy reads its true count)")
    return _unwrap(key)


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _wrap(fn(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))


class StrictArray:
    """A device array of the stand-in: a NumPy array that refuses implicit host reads."""

    __slots__ = ("_a",)
    __array_ufunc__ = None  # NumPy ufuncs on it raise TypeError (and operators defer to it)

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    # --- what refuses ---------------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise _refuse("np.asarray(device array)")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise _refuse(f"numpy.{func.__name__}(device array) (call the array's namespace)")

    def __float__(self) -> float:
        raise _refuse("float(device array)")

    def __int__(self) -> int:
        raise _refuse("int(device array)")

    def __index__(self) -> int:
        raise _refuse("using a device array as an index")

    def __complex__(self) -> complex:
        raise _refuse("complex(device array)")

    def __bool__(self) -> bool:
        raise _refuse("bool(device array) (an if on device data)")

    def __iter__(self) -> Iterator[Any]:
        raise _refuse("iterating over a device array")

    def item(self, *args: Any) -> Any:
        raise _refuse(".item()")

    def tolist(self) -> Any:
        raise _refuse(".tolist()")

    # --- explicit download -----------------------------------------------------------------
    def get(self) -> np.ndarray:
        """CuPy's explicit download (counted)."""
        return NAMESPACE.asnumpy(self)

    # --- attributes ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._a.shape  # type: ignore[no-any-return]

    @property
    def dtype(self) -> np.dtype:
        return self._a.dtype

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def size(self) -> int:
        return self._a.size

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    @property
    def itemsize(self) -> int:
        return self._a.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        return self._a.strides  # type: ignore[no-any-return]

    @property
    def flags(self) -> Any:
        return self._a.flags

    @property
    def T(self) -> StrictArray:  # noqa: N802 (NumPy's name)
        return StrictArray(self._a.T)

    @property
    def real(self) -> StrictArray:
        return StrictArray(self._a.real)

    @property
    def base(self) -> Any:
        return None if self._a.base is None else StrictArray(np.asarray(self._a.base))

    def __len__(self) -> int:
        return len(self._a)

    def __repr__(self) -> str:
        return f"StrictArray(shape={self.shape}, dtype={self.dtype})"

    def __array_namespace__(self, api_version: Any = None) -> StrictNamespace:
        return NAMESPACE

    def __getitem__(self, key: Any) -> StrictArray:
        return StrictArray(np.asarray(self._a[_index(key)]))

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[_index(key)] = _unwrap(value)

    def __getattr__(self, name: str) -> Any:
        if name not in _METHODS:
            raise AttributeError(f"StrictArray has no attribute {name!r}")
        method = getattr(self._a, name)
        return lambda *args, **kwargs: _call(method, args, kwargs)


# Array methods CuPy's ndarray has too.
_METHODS = frozenset("""
all any argmax argmin argsort astype clip conj copy cumprod cumsum diagonal dot fill flatten max
mean min nonzero prod ravel repeat reshape round sort squeeze std sum swapaxes take trace
transpose var view
""".split())


def _binary(op: Any) -> Any:
    def method(self: StrictArray, other: Any) -> Any:
        return StrictArray(np.asarray(op(self._a, _unwrap(other))))

    def reflected(self: StrictArray, other: Any) -> Any:
        return StrictArray(np.asarray(op(_unwrap(other), self._a)))

    return method, reflected


def _inplace(op: Any) -> Any:
    def method(self: StrictArray, other: Any) -> StrictArray:
        op(self._a, _unwrap(other))
        return self

    return method


for _name, _op, _iop in [
    ("add", operator.add, operator.iadd), ("sub", operator.sub, operator.isub),
    ("mul", operator.mul, operator.imul), ("truediv", operator.truediv, operator.itruediv),
    ("floordiv", operator.floordiv, operator.ifloordiv), ("mod", operator.mod, operator.imod),
    ("pow", operator.pow, operator.ipow), ("matmul", operator.matmul, operator.imatmul),
    ("and", operator.and_, operator.iand), ("or", operator.or_, operator.ior),
    ("xor", operator.xor, operator.ixor), ("lshift", operator.lshift, operator.ilshift),
    ("rshift", operator.rshift, operator.irshift),
]:
    _fwd, _ref = _binary(_op)
    setattr(StrictArray, f"__{_name}__", _fwd)
    setattr(StrictArray, f"__r{_name}__", _ref)
    setattr(StrictArray, f"__i{_name}__", _inplace(_iop))
for _name, _op in [("lt", operator.lt), ("le", operator.le), ("gt", operator.gt),
                   ("ge", operator.ge), ("eq", operator.eq), ("ne", operator.ne)]:
    setattr(StrictArray, f"__{_name}__", _binary(_op)[0])
StrictArray.__hash__ = None  # type: ignore[assignment]  (arrays are unhashable, as in NumPy)
for _name, _op in [("neg", operator.neg), ("pos", operator.pos), ("abs", operator.abs),
                   ("invert", operator.invert)]:
    setattr(StrictArray, f"__{_name}__",
            (lambda op: lambda self: StrictArray(np.asarray(op(self._a))))(_op))


class _Function:
    """A NumPy function run on device arrays; ufuncs keep ``.at``, ``.reduce`` and ``.outer``."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn
        self.__name__ = getattr(fn, "__name__", "function")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._fn, args, kwargs)

    def at(self, a: StrictArray, indices: Any, b: Any = None) -> None:
        self._fn.at(_unwrap(a), _index(indices), *(() if b is None else (_unwrap(b),)))

    def reduce(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._fn.reduce, args, kwargs)

    def outer(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._fn.outer, args, kwargs)


class _Module:
    """A sub-namespace (``linalg``, ``lib.stride_tricks``) of wrapped functions."""

    def __init__(self, **members: Any) -> None:
        self.__dict__.update(members)


class StrictNamespace:
    """The stand-in device's array module (see the module docstring)."""

    __name__ = "strict_device"
    ndarray = StrictArray

    def __init__(self) -> None:
        self.transfers = TransferLog()
        for name in CUPY_FUNCTIONS:
            setattr(self, name, _Function(getattr(np, name)))
        for name in _PASSTHROUGH:
            setattr(self, name, getattr(np, name))
        self.linalg = _Module(**{n: _Function(getattr(np.linalg, n)) for n in (
            "norm", "inv", "solve", "det", "slogdet", "eigh", "svd", "qr", "cholesky")})
        self.lib = _Module(stride_tricks=_Module(
            as_strided=_Function(np.lib.stride_tricks.as_strided),
            sliding_window_view=_Function(np.lib.stride_tricks.sliding_window_view)))

    # --- the explicit transfers -------------------------------------------------------------
    def asarray(self, a: Any, dtype: Any = None, order: Any = None) -> StrictArray:
        """Device data stays (converted to ``dtype`` if given); host data is uploaded (counted)."""
        if type(a) is StrictArray:
            return a if dtype is None or a.dtype == dtype else StrictArray(a._a.astype(dtype))
        host = np.array(a, dtype=dtype, order=order or "K", copy=True)
        self.transfers.uploads += 1
        self.transfers.upload_shapes[host.shape] += 1
        return StrictArray(host)

    def array(self, a: Any, dtype: Any = None, copy: bool = True, order: Any = None
              ) -> StrictArray:
        if type(a) is StrictArray:
            return StrictArray(np.array(a._a, dtype=dtype, copy=copy, order=order or "K"))
        return self.asarray(a, dtype=dtype, order=order)

    def asnumpy(self, a: Any) -> np.ndarray:
        """Download (counted); host data passes through, as in CuPy."""
        if type(a) is not StrictArray:
            return np.asarray(a)
        self.transfers.downloads += 1
        return np.array(a._a, copy=True)


NAMESPACE = StrictNamespace()


@contextlib.contextmanager
def strict_cuda() -> Iterator[StrictNamespace]:
    """Within the block ``device="cuda"`` is the stand-in device; yields it with a fresh
    transfer log (``ns.transfers``)."""
    NAMESPACE.transfers = TransferLog()
    with cuda_namespace_override(NAMESPACE):
        yield NAMESPACE
