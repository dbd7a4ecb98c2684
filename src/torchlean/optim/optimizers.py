"""Optimisers with torch.optim's update formulas: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta
and LBFGS.

An optimiser holds a list of parameters (``Param`` objects, or anything with a ``parameters()``
method returning them) and updates each one's ``data`` in place from its ``grad``. The base class
walks the parameters and keeps the per-parameter state; each optimiser only says how one
parameter's state starts (``init_single``) and how one parameter updates (``apply_single``), as in
MLX's optimisers. The formulas, and the order of their floating-point operations, follow
``torch/optim/sgd.py`` and ``adam.py`` (single-tensor path), so float64 trajectories agree with
PyTorch's to rounding.

State lives next to the parameter (NumPy or CuPy, whatever ``param.array`` is) and is created
when the optimiser is built, so a fresh optimiser already has the full ``state_dict`` key set and
a checkpoint can be loaded into it. A parameter moved to a device after the optimiser was built
(``model.to("cuda")``, or ``fit`` on a device) takes its state along at the next ``step`` (one
explicit upload per state array, once). On a device every update runs there, in place on
``param.array`` (the same buffer every step, which a captured CUDA graph relies on) and on the
moment buffers: on CuPy as one fused ``ElementwiseKernel`` per parameter and step, elsewhere (NumPy,
the tests' stand-in device) through the array namespace, with the same formula and order of
float operations either way. Step counts and bias corrections stay on the host (plain numbers),
so a step never reads device data back.

``state_dict()`` is flat, ``dict[str, np.ndarray]``, ready for ``torchlean.checkpoint.save``.
As torch's, it refers to the live state rather than copying it: a host parameter's state
arrays are the optimiser's own buffers (later steps change them; changing them in place
changes the optimiser), so a snapshot is ``copy.deepcopy(opt.state_dict())``, as in torch.
State on a device comes back as host copies (explicit downloads). The keys:

- ``"step"``: the number of ``step()`` calls (0-d int64);
- ``"hyper.<name>"``: hyper-parameters (0-d float64, or 0-d bool for ``nesterov``);
- ``"state.<i>.<name>"``: state of parameter ``i`` (e.g. ``"state.3.exp_avg"``, and
  ``"state.3.step"``, the number of updates that parameter received, 0-d int64).

``load_state_dict`` restores all of these, hyper-parameters included (as torch does), so training
resumes bit-identically; set ``opt.lr`` afterwards to change the learning rate. As torch's, it
takes a given host array of the right dtype as the state itself (no copy: the loaded state dict
and the optimiser share it); read-only arrays (a file's) and device state are copied.

Parameter groups as in torch: ``params`` may be a list of dicts (``{"params": [...], "lr": ...}``),
each group's missing hyper-parameters taken from the constructor's (``defaults``);
``param_groups`` is that list, and setting ``group["lr"]`` (what the ``lr_scheduler`` classes
do) checks the value and changes the group's updates from the next step. Extra keys (a
scheduler's ``initial_lr``) are kept. ``opt.lr = x`` sets every group's rate. With several
groups, ``state_dict`` holds groups after the first as ``"group.<g>.<name>"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..checkpoint import describe_mismatches, register_mapping_kind
from ..core.backend import is_cupy, namespace_of, numeric_array, to_device, to_host
from ..core.errors import (
    ShapeError,
    TorchLeanError,
    UnsupportedArgumentError,
    checked_keywords,
)
from ..engine.params import Param
from ..engine.tensor import Tensor, as_tensor, enable_grad
from . import fast_update

__all__ = [
    "LBFGS", "SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Optimizer", "OptimizerError",
    "ParamGroup", "RMSprop",
]


class OptimizerError(TorchLeanError):
    """Bad hyper-parameters, parameter lists or optimiser state."""


def _collect_params(params: Any, owner: str) -> list[Any]:
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    if hasattr(params, "data") and hasattr(params, "grad"):
        raise OptimizerError(f"{owner}: params must be an iterable of Param objects, "
                             f"found a single {type(params).__name__} (wrap it in a list)")
    if isinstance(params, Mapping) or not isinstance(params, Iterable):
        raise OptimizerError(f"{owner}: params must be an iterable of Param objects, "
                             f"found {type(params).__name__}")
    out = list(params)
    if not out:
        raise OptimizerError(f"{owner}: got an empty parameter list")
    seen: set[int] = set()
    for i, p in enumerate(out):
        if not (hasattr(p, "data") and hasattr(p, "grad")):
            raise OptimizerError(f"{owner}: parameter {i} is a {type(p).__name__}, expected a "
                                 "Param (an object with .data and .grad)")
        if id(p) in seen:
            raise OptimizerError(f"{owner}: parameter {i} ({_label(p, i)}) appears more than once")
        seen.add(id(p))
    return out


def _is_group_list(params: Any) -> bool:
    """Whether ``params`` is torch's list of parameter-group dicts."""
    return isinstance(params, list | tuple) and bool(params) and all(
        isinstance(g, Mapping) for g in params)


def _label(param: Any, index: int) -> str:
    name = getattr(param, "name", None)
    return repr(name) if name else f"#{index}"


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        if not (isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "fiu"):
            raise OptimizerError(f"{owner}: {name} must be a real number, found {value!r}")
    return float(value)


def _count_step(state: dict[str, Any]) -> None:
    """``state["step"] += 1``: the counter is a host 0-d int64 array (``state_dict``'s form),
    counted through ``fill`` (an in-place ufunc on a 0-d array costs about 1-3 us; this
    0.2 us; the same value)."""
    step = state["step"]
    if type(step) is np.ndarray and step.ndim == 0 and step.dtype == np.int64:
        step.fill(step.item() + 1)
    else:
        state["step"] += 1


class ParamGroup(dict):  # type: ignore[type-arg]
    """One entry of ``optimizer.param_groups``: ``"params"`` and the group's hyper-parameters.

    Setting a hyper-parameter goes through the optimiser's checks (a bad value raises
    ``OptimizerError`` and changes nothing); a torch pair (``"betas"``, Rprop's ``"etas"``, ...:
    ``Optimizer.PAIRS``) reads and writes its two flat hyper-parameters (Adam's ``beta1`` and
    ``beta2``) as torch's tuple. Any other key is stored as given (schedulers keep theirs here).
    """

    def __init__(self, owner: Optimizer, params: list[Any], hyper: dict[str, Any]) -> None:
        super().__init__(params=params)
        self._owner = owner
        dict.update(self, owner.check_hyper(hyper))

    def hyper(self) -> dict[str, Any]:
        """The group's hyper-parameters (the keys of ``owner.defaults``)."""
        return {k: dict.__getitem__(self, k) for k in self._owner.defaults}

    def __getitem__(self, key: Any) -> Any:
        pair = self._owner.pair_keys(key)
        if pair is not None:
            return self._owner.pair_value(key, (dict.__getitem__(self, pair[0]),
                                                dict.__getitem__(self, pair[1])))
        return dict.__getitem__(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        defaults = self._owner.defaults
        pair = self._owner.pair_keys(key)
        if pair is not None:
            first, second = self._owner.split_pair(key, value)
            dict.update(self, self._owner.check_hyper({**self.hyper(), pair[0]: first,
                                                       pair[1]: second}))
        elif key in defaults:
            dict.update(self, self._owner.check_hyper({**self.hyper(), key: value}))
        elif key == "params":
            raise OptimizerError(f"{type(self._owner).__name__}: a group's params cannot be "
                                 "replaced; use add_param_group for new parameters")
        else:
            dict.__setitem__(self, key, value)

    def __contains__(self, key: object) -> bool:
        return self._owner.pair_keys(key) is not None or dict.__contains__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


class OptimizerState(dict):  # type: ignore[type-arg]
    """``Optimizer.state_dict()``: the flat arrays of the module doc, which also answer torch's
    two keys: ``["state"]`` (parameter index -> its state tensors, for parameters that took a
    step: tensors over the same arrays, so ``sd["state"][0]["momentum_buffer"].mul_(0)``
    reaches the optimiser, as in torch) and ``["param_groups"]`` (each group's
    hyper-parameters and ``"params"``, the indices of its parameters), so scripts that read
    those run. Saving and loading use the flat keys."""

    def __init__(self, flat: dict[str, np.ndarray], groups: list[dict[str, Any]]) -> None:
        super().__init__(flat)
        self._groups = groups
        self._state: dict[int, dict[str, Tensor]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # (a copy, ``copy.deepcopy`` or pickle, makes its own ``["state"]`` tensors over its
        # own arrays, not copies of these)
        return {"_groups": self._groups, "_state": None}

    def checkpoint_extra(self) -> list[dict[str, Any]]:
        """What a checkpoint keeps beside the arrays (``checkpoint.register_mapping_kind``):
        the groups of ``["param_groups"]``."""
        return self._groups

    @classmethod
    def from_checkpoint(cls, items: dict[Any, Any], extra: Any) -> OptimizerState:
        """The state dict a checkpoint saved (untrusted: ``ValueError`` says what is wrong)."""
        for key, value in items.items():
            if not isinstance(key, str) or not isinstance(value, np.ndarray | np.generic) and \
                    not hasattr(value, "__array_namespace__"):
                raise ValueError(f"entry {key!r}: expected a name and an array, found "
                                 f"{type(value).__name__}")
        if not isinstance(extra, list) or not all(isinstance(g, dict) for g in extra):
            raise ValueError("param_groups must be a list of dicts")
        for g in extra:
            params = g.get("params")
            if not (isinstance(params, list) and all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in params)):
                raise ValueError(f"a group's 'params' must be a list of indices, found "
                                 f"{params!r:.60}")
            for key, value in g.items():
                if key != "params" and not _plain(value):
                    raise ValueError(f"group entry {key!r}: expected a number, string, bool, "
                                     f"None or a list of them, found {value!r:.60}")
        return cls(items, extra)

    def __missing__(self, key: Any) -> Any:
        if key == "param_groups":
            return [dict(g) for g in self._groups]
        if key == "state":
            if self._state is None:  # made once: the same tensors at every read, as torch's
                per: dict[int, dict[str, Tensor]] = {}
                for name, value in self.items():
                    parts = name.split(".")
                    if parts[0] == "state" and len(parts) == 3:
                        per.setdefault(int(parts[1]), {})[parts[2]] = as_tensor(value)
                self._state = {i: st for i, st in per.items()
                               if "step" not in st or st["step"].item() > 0}
            return self._state
        raise KeyError(key)


def _plain(value: Any) -> bool:
    """A scalar, or a flat list of scalars (what a parameter group holds besides params)."""
    if isinstance(value, list):
        return all(_plain(v) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


register_mapping_kind("optimizer_state", OptimizerState)


class Optimizer:
    """Walks the parameters, keeps per-parameter state, and counts steps.

    Subclasses give their hyper-parameters (a flat dict of floats and bools) to ``__init__``,
    check them in ``check_hyper``, and implement ``init_single`` and ``apply_single``; while a
    parameter updates, ``self.hyper`` is its group's hyper-parameters.
    """

    # Hyper-parameters added after checkpoints without them were written: a state dict that
    # lacks one loads with this value (torch's default).
    _LATER_HYPER = {"maximize": False, "amsgrad": False}
    # torch's tuple-valued hyper-parameters, each kept as two flat ones (``state_dict`` holds
    # floats): the pair's name -> its two hyper-parameters. A pair applies to an optimiser
    # whose ``defaults`` have its first member.
    PAIRS: dict[str, tuple[str, str]] = {"betas": ("beta1", "beta2")}
    # State that stays a host array when the parameter moves to a device: the step counter, and
    # the scalars an update reads as plain numbers (NAdam's ``mu_product``, ASGD's ``eta``), so
    # that a step never reads device data back.
    HOST_STATE: frozenset[str] = frozenset({"step"})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # torchlean's optimisers refuse a torch keyword they do not take by name, before
        # anything is built (a user's own subclass keeps Python's TypeError)
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("torchlean.") and "__init__" in cls.__dict__:
            cls.__init__ = checked_keywords(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(self, params: Any, hyper: dict[str, Any]) -> None:
        name = type(self).__name__
        self.defaults: dict[str, Any] = self.check_hyper(hyper)
        self.params: list[Any] = []
        self.param_groups: list[ParamGroup] = []
        self._group_of: list[int] = []  # the group index of each parameter
        self._active: ParamGroup | None = None  # the group being applied in step()
        self._active_hyper: dict[str, Any] | None = None  # its hyper-parameters, read once
        self.state: list[dict[str, Any]] = []
        self._state_xp: list[Any] = []  # the namespace each parameter's state lives in
        self._fresh: list[bool] = []  # state as init_single made it (no step, no load)
        self.step_count = 0
        if _is_group_list(params):
            groups = list(params)
            if not groups:
                raise OptimizerError(f"{name}: got an empty parameter list")
            for g in groups:
                self.add_param_group(g)
        else:
            self.add_param_group({"params": _collect_params(params, name)})

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add a group (``{"params": ..., "<hyper>": value}``; missing hyper-parameters from
        ``defaults``), as torch's ``add_param_group``."""
        name = type(self).__name__
        if not isinstance(group, Mapping) or "params" not in group:
            raise OptimizerError(f"{name}: a parameter group must be a dict with a 'params' key, "
                                 f"found {type(group).__name__}")
        params = _collect_params(group["params"], name)
        known = set(self.defaults)
        hyper = dict(self.defaults)
        extra: dict[str, Any] = {}
        for key, value in group.items():
            if key == "params":
                continue
            pair = self.pair_keys(key)
            if pair is not None:
                hyper[pair[0]], hyper[pair[1]] = self.split_pair(key, value)
            elif key in known:
                hyper[key] = value
            else:
                extra[key] = value
        seen = {id(p) for p in self.params}
        for i, p in enumerate(params):
            if id(p) in seen:
                raise OptimizerError(f"{name}: parameter {_label(p, i)} appears in more than one "
                                     "parameter group")
        entry = ParamGroup(self, params, hyper)
        for key, value in extra.items():
            entry[key] = value
        index = len(self.param_groups)
        self.param_groups.append(entry)
        for p in params:
            self.params.append(p)
            self._group_of.append(index)
            self._active = entry
            state = {"step": np.zeros((), dtype=np.int64)}
            state.update(self.init_single(p))
            self.state.append(state)
            self._state_xp.append(namespace_of(p.array))
            self._fresh.append(True)
        self._active = None

    # -- the two methods an optimiser implements ------------------------------------------------
    def init_single(self, param: Any) -> dict[str, Any]:
        """The initial state of one parameter (arrays in the parameter's namespace)."""
        raise NotImplementedError

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        """Update ``param.array`` in place from ``grad``; ``state["step"]`` is already counted."""
        raise NotImplementedError

    # -- hyper-parameters -----------------------------------------------------------------------
    def pair_keys(self, key: Any) -> tuple[str, str] | None:
        """The two flat hyper-parameters behind torch's pair ``key`` (``"betas"``), or None."""
        pair = self.PAIRS.get(key) if isinstance(key, str) else None
        return pair if pair is not None and pair[0] in self.defaults else None

    def split_pair(self, key: str, value: Any) -> tuple[Any, Any]:
        """torch's pair ``value`` for ``key`` as its two members (checked by ``check_hyper``)."""
        try:
            first, second = value
        except (TypeError, ValueError):
            raise OptimizerError(f"{type(self).__name__}: {key} must be a pair of numbers, "
                                 f"found {value!r}") from None
        return first, second

    def pair_value(self, key: str, values: tuple[Any, Any]) -> tuple[Any, Any]:
        """The pair ``key`` as torch shows it, from its two stored members."""
        return values

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        """Validated, normalised hyper-parameters; raises ``OptimizerError``."""
        return dict(hyper)

    def _set_hyper(self, hyper: dict[str, Any]) -> None:
        """Set these hyper-parameters in every group (checked first: all or nothing)."""
        checked = [self.check_hyper({**g.hyper(), **hyper}) for g in self.param_groups]
        for group, values in zip(self.param_groups, checked, strict=True):
            dict.update(group, values)

    @property
    def hyper(self) -> dict[str, Any]:
        """The hyper-parameters of the group being updated (the first group outside step)."""
        if self._active_hyper is not None:
            return self._active_hyper
        group = self._active if self._active is not None else self.param_groups[0]
        return group.hyper()

    @property
    def lr(self) -> float:
        return float(self.hyper["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        self._set_hyper({**self.hyper, "lr": value})

    # -- stepping -------------------------------------------------------------------------------
    def step(self, grads: Any = None) -> Any:
        """One update of every parameter that requires grad and has a gradient.

        With ``grads=None`` each parameter's ``.grad`` is used; otherwise ``grads`` is a list
        aligned with the parameters (``None`` entries are skipped), or a closure (torch's
        ``step(closure)``: called first, with gradients enabled, and its loss returned). Every
        gradient is checked before any parameter changes.
        """
        name = type(self).__name__
        loss = None
        if callable(grads):
            with enable_grad():
                loss = grads()
            grads = None
        if grads is None:
            grad_list = [p.grad for p in self.params]
        else:
            if isinstance(grads, Mapping) or not isinstance(grads, Iterable):
                raise ShapeError(f"{name}.step: grads must be a list aligned with the parameters, "
                                 f"found {type(grads).__name__}")
            grad_list = list(grads)
            if len(grad_list) != len(self.params):
                raise ShapeError(f"{name}.step: got {len(grad_list)} gradients for "
                                 f"{len(self.params)} parameters")
        work = []
        states, state_xp, fresh = self.state, self._state_xp, self._fresh
        groups, group_of = self.param_groups, self._group_of
        for i, (p, g) in enumerate(zip(self.params, grad_list, strict=True)):
            if g is None or not getattr(p, "requires_grad", True):
                continue
            if type(g) is not np.ndarray and isinstance(g, Tensor):  # (no ABC check per array)
                g = g.array
            data = p.array
            if type(g) is not np.ndarray or type(data) is not np.ndarray:
                # (A host array for a host parameter, the training loop's case, needs no
                # conversion: its shape and float dtype are checked below.)
                xp = namespace_of(data)
                label = f"{name}.step: gradient of parameter {_label(p, i)}"
                gxp = namespace_of(g)
                if gxp is xp or gxp is np:  # host data given for a device parameter: one upload
                    g = numeric_array(label, g, xp) if gxp is xp else to_device(
                        numeric_array(label, g), xp)
                else:  # a device gradient for a host parameter (or another device): moved
                    g = to_device(g, xp)
            else:
                xp = np
            if g.shape != data.shape and tuple(g.shape) != tuple(data.shape):
                raise ShapeError(f"{name}.step: gradient of parameter {_label(p, i)} has shape "
                                 f"{tuple(g.shape)}, the parameter has shape {tuple(data.shape)}")
            if g.dtype.kind != "f":
                raise ShapeError(f"{name}.step: gradient of parameter {_label(p, i)} has dtype "
                                 f"{g.dtype}, expected a float dtype")
            if g.dtype != data.dtype:
                g = g.astype(data.dtype)
            # (``_state_on`` inlined for the common case: state already where the parameter is.)
            if state_xp[i] is xp:
                fresh[i] = False
                state = states[i]
            else:
                state = self._state_on(i, xp)
            work.append((p, g, state, groups[group_of[i]]))
        try:
            self._apply_all(work)
        finally:
            self._active = None
            self._active_hyper = None
        self.step_count += 1
        return loss

    def _apply_all(self, work: list[tuple[Any, Any, dict[str, Any], ParamGroup]]) -> None:
        """Update each ``(param, checked gradient, state, group)`` of ``work`` in order
        (``apply_single`` with ``self.hyper`` set to the group's hyper-parameters)."""
        for p, g, state, group in work:
            if group is not self._active:
                self._active = group
                self._active_hyper = group.hyper()  # read by every apply_single
            _count_step(state)
            self.apply_single(p, g, state)
            if isinstance(p, Param):
                p.mark_updated()

    def _state_on(self, i: int, xp: Any) -> dict[str, Any]:
        """Parameter ``i``'s state with its arrays in namespace ``xp`` (moved there, once, when
        the parameter moved after the optimiser was built: made there afresh if no step has
        changed it yet, else uploaded); the step counter stays on the host.
        """
        state = self.state[i]
        if self._state_xp[i] is not xp:
            if self._fresh[i]:  # still the initial state: made afresh there, no upload
                state.update(self.init_single(self.params[i]))
            for key, value in state.items():
                if key not in self.HOST_STATE and namespace_of(value) is not xp:
                    state[key] = to_device(value, xp)
            self._state_xp[i] = xp
        self._fresh[i] = False
        return state

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``grad = None``, torch's default), or with
        ``set_to_none=False`` fill the existing gradients with zeros in place."""
        for p in self.params:
            g = p.grad
            if set_to_none or g is None:
                p.grad = None
            elif hasattr(g, "zero_"):
                g.zero_()
            else:
                g[...] = 0

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> OptimizerState:
        """The whole optimiser state, flat (host NumPy arrays: the live state buffers of host
        parameters, not copies, as torch's); see the module doc."""
        out: dict[str, np.ndarray] = {"step": np.asarray(self.step_count, dtype=np.int64)}
        for g, group in enumerate(self.param_groups):
            for key, value in group.hyper().items():
                dtype = np.bool_ if isinstance(value, bool) else np.float64
                out[f"hyper.{key}" if g == 0 else f"group.{g}.{key}"] = np.asarray(value,
                                                                                   dtype=dtype)
        for i, state in enumerate(self.state):
            for key, value in state.items():
                # (a reference, as torch's; ``to_host`` copies device state explicitly)
                out[f"state.{i}.{key}"] = value if type(value) is np.ndarray else to_host(value)
        groups, k = [], 0
        for group in self.param_groups:
            n = len(group["params"])
            groups.append({**group.hyper(), **{key: v for key, v in group.items()
                                               if key != "params"},
                           "params": list(range(k, k + n))})
            k += n
        return OptimizerState(out, groups)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()``: keys, shapes and dtypes must match exactly.

        Every mismatch is reported at once, and nothing changes unless all of it fits.
        """
        name = type(self).__name__
        expected = self.state_dict()
        found = {k: np.asarray(to_host(v)) for k, v in state_dict.items()}
        for key in expected:
            later = self._LATER_HYPER.get(key.rsplit(".", 1)[-1])
            if later is not None and key not in found and key.startswith(("hyper.", "group.")):
                found[key] = np.asarray(later)
        problems = describe_mismatches(expected, found)
        if problems:
            raise OptimizerError(f"{name}.load_state_dict: state does not fit this optimiser:\n  "
                                 + "\n  ".join(problems))
        new_hyper = []
        for g, group in enumerate(self.param_groups):
            prefix = "hyper." if g == 0 else f"group.{g}."
            hyper = {k: (bool(found[prefix + k]) if isinstance(v, bool)
                         else float(found[prefix + k])) for k, v in group.hyper().items()}
            new_hyper.append(self.check_hyper(hyper))
        steps = [found[f"state.{i}.step"] for i in range(len(self.state))]
        if int(found["step"]) < 0 or any(int(s) < 0 for s in steps):
            raise OptimizerError(f"{name}.load_state_dict: negative step counter")
        # Everything fits: now change state.
        for group, values in zip(self.param_groups, new_hyper, strict=True):
            dict.update(group, values)
        self.step_count = int(found["step"])
        for i, (p, state) in enumerate(zip(self.params, self.state, strict=True)):
            xp = namespace_of(p.array)
            for key, old in state.items():
                arr = found[f"state.{i}.{key}"]
                host = key in self.HOST_STATE
                if (host or xp is np) and type(arr) is np.ndarray and \
                        arr.flags.writeable and arr.flags.c_contiguous:
                    # The given array itself, as torch's (its ``.to`` of a tensor already of
                    # the parameter's dtype and device is that tensor): the state dict and
                    # this optimiser then share it; ``copy.deepcopy`` the state dict for a
                    # copy. (A read-only or strided array is copied.)
                    state[key] = arr
                elif host:
                    state[key] = np.array(arr, copy=True)
                elif namespace_of(old) is xp:
                    old[...] = to_device(arr, xp)  # in place: the buffers stay the same
                else:  # the parameter moved since the state was made: one explicit upload
                    state[key] = to_device(np.array(arr, copy=True), xp)
            self._state_xp[i] = xp
            self._fresh[i] = False

    def __repr__(self) -> str:
        groups = "; ".join(", ".join(f"{k}={v}" for k, v in g.hyper().items())
                           for g in self.param_groups)
        return f"{type(self).__name__}({len(self.params)} params, {groups})"


def _torch_switches(owner: str, foreach: Any = None, fused: Any = None,
                    capturable: bool = False, differentiable: bool = False) -> None:
    """torch's implementation switches: ``foreach`` picks torch's kernels (any value: the
    update is the same); ``fused``, ``capturable`` and ``differentiable`` only at their defaults
    (checked before anything is built)."""
    if foreach not in (None, True, False):
        raise OptimizerError(f"{owner}: foreach must be None or a bool, found {foreach!r}")
    for key, value, default in (("fused", fused, (None, False)),
                                ("capturable", capturable, (False,)),
                                ("differentiable", differentiable, (False,))):
        if value not in default:
            raise UnsupportedArgumentError(f"{owner}: {key}={value!r} is not supported (only "
                                           f"{' or '.join(map(repr, default))})")


def _flag(owner: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise OptimizerError(f"{owner}: {key} must be a bool, found {value!r}")
    return bool(value)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, weight decay and Nesterov.

    As torch.optim.SGD: ``g = grad + weight_decay * p``; with momentum the buffer starts as ``g``
    on a parameter's first update and is then ``buf = momentum * buf + (1 - dampening) * g``;
    the step is ``g + momentum * buf`` (Nesterov) or ``buf``; ``p -= lr * step``.
    """

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        _torch_switches("SGD", foreach=foreach, fused=fused, differentiable=differentiable)
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov,
                                  "maximize": maximize})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("lr", "momentum", "dampening", "weight_decay"):
            value = _number("SGD", key, hyper[key])
            if not value >= 0.0 or value == float("inf"):
                raise OptimizerError(f"SGD: {key} must be finite and >= 0, found {value}")
            out[key] = value
        nesterov = hyper["nesterov"]
        if not isinstance(nesterov, bool | np.bool_):
            raise OptimizerError(f"SGD: nesterov must be a bool, found {nesterov!r}")
        out["nesterov"] = bool(nesterov)
        out["maximize"] = _flag("SGD", "maximize", hyper.get("maximize", False))
        if out["nesterov"] and (out["momentum"] <= 0.0 or out["dampening"] != 0.0):
            raise OptimizerError("SGD: nesterov momentum requires momentum > 0 and dampening 0, "
                                 f"found momentum={out['momentum']}, "
                                 f"dampening={out['dampening']}")
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        if self.hyper["momentum"] == 0.0:
            return {}
        return {"momentum_buffer": namespace_of(param.array).zeros_like(param.array)}

    def _apply_all(self, work: list[tuple[Any, Any, dict[str, Any], ParamGroup]]) -> None:
        # Plain SGD on host arrays (no momentum, no weight decay: the training loop's case)
        # without a call per parameter: the same update ``apply_single`` makes (the fast
        # kernels' in-place axpy, else ``p += (-lr) * g``), in the same order.
        hyper: dict[str, Any] | None = None
        group = None
        for p, g, state, grp in work:
            if grp is not group:
                group = grp
                hyper = self._active_hyper = grp.hyper()
                self._active = grp
                plain = (hyper["momentum"] == 0.0 and hyper["weight_decay"] == 0.0
                         and not hyper["maximize"])
                lr = hyper["lr"]
            _count_step(state)
            data = p.array
            if plain and type(data) is np.ndarray:
                if not fast_update.sgd_update(data, g, lr):
                    data += (-lr) * g
            else:
                self.apply_single(p, g, state)
            if isinstance(p, Param):
                p.mark_updated()

    def plain(self) -> bool:
        """Whether every step is ``p -= lr * grad`` alone: one group, no momentum, no weight
        decay (what a generated SGD step computes: ``training.Stepper.sgd_step``)."""
        if len(self.param_groups) != 1:
            return False
        h = self.param_groups[0].hyper()
        return h["momentum"] == 0.0 and h["weight_decay"] == 0.0 and not h["maximize"]

    def count_step(self, updated: Sequence[Any]) -> None:
        """The bookkeeping of a plain step whose updates ran elsewhere (a generated plan that
        changed ``updated`` in place): each one's step counter and version, as ``step``
        keeps them for a parameter it updates, then the optimiser's step count."""
        index = {id(p): i for i, p in enumerate(self.params)}
        for p in updated:
            i = index[id(p)]
            _count_step(self._state_on(i, np))
            if isinstance(p, Param):
                p.mark_updated()
        self.step_count += 1

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.array
        if h["maximize"]:  # torch's first step: ascend
            grad = -grad
        if type(p) is not np.ndarray and is_cupy(namespace_of(p)):
            _sgd_fused(p, grad, state, h)
            return
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        if h["momentum"] != 0.0:
            buf = state.get("momentum_buffer")
            if buf is None:  # momentum switched on after the optimiser was built
                buf = state["momentum_buffer"] = namespace_of(p).zeros_like(p)
                buf[...] = grad
            elif int(state["step"]) == 1:
                buf[...] = grad
            else:
                buf *= h["momentum"]
                buf += (1.0 - h["dampening"]) * grad
            grad = grad + h["momentum"] * buf if h["nesterov"] else buf
        # Under the fast kernels, one in-place BLAS axpy (fast_update: SciPy imported on the
        # first fast step, its threads matched to NumPy's; W2's update 155 -> 70 us).
        if not fast_update.sgd_update(p, grad, h["lr"]):
            p += (-h["lr"]) * grad


class Adam(Optimizer):
    """Adam with bias correction (torch.optim.Adam).

    ``weight_decay`` is L2 regularisation added to the gradient (``g = grad + wd * p``); for
    decoupled decay use ``AdamW`` (or ``decoupled_weight_decay=True``). ``amsgrad`` divides by
    the running maximum of the second moment (state ``max_exp_avg_sq``); ``maximize`` ascends
    (the gradient negated first), as torch's.
    """

    decoupled = False

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False) -> None:
        name = type(self).__name__
        _torch_switches(name, foreach=foreach, fused=fused, capturable=capturable,
                        differentiable=differentiable)
        if _flag(name, "decoupled_weight_decay", decoupled_weight_decay):
            self.decoupled = True
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise OptimizerError(f"{name}: betas must be a pair of numbers, "
                                 f"found {betas!r}") from None
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                                  "weight_decay": weight_decay, "amsgrad": amsgrad,
                                  "maximize": maximize})

    @property
    def betas(self) -> tuple[float, float]:
        return (self.hyper["beta1"], self.hyper["beta2"])

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        name = type(self).__name__
        out = {key: _number(name, key, hyper[key])
               for key in ("lr", "beta1", "beta2", "eps", "weight_decay")}
        for key in ("lr", "weight_decay"):
            if not 0.0 <= out[key] < float("inf"):
                raise OptimizerError(f"{name}: {key} must be finite and >= 0, found {out[key]}")
        for key in ("beta1", "beta2"):
            if not 0.0 <= out[key] < 1.0:
                raise OptimizerError(f"{name}: {key} must be in [0, 1), found {out[key]}")
        if not 0.0 < out["eps"] < float("inf"):
            raise OptimizerError(f"{name}: eps must be finite and > 0, found {out['eps']}")
        for key in ("amsgrad", "maximize"):
            out[key] = _flag(name, key, hyper.get(key, False))
        return out

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        state = {"exp_avg": xp.zeros_like(param.array), "exp_avg_sq": xp.zeros_like(param.array)}
        if self.hyper["amsgrad"]:
            state["max_exp_avg_sq"] = xp.zeros_like(param.array)
        return state

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        lr, beta1, beta2, eps, wd = h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]
        p = param.array
        xp = namespace_of(p)
        if h["maximize"]:  # torch's first step: ascend
            grad = -grad
        peak = None
        if h["amsgrad"]:
            peak = state.get("max_exp_avg_sq")
            if peak is None:  # amsgrad switched on after the optimiser was built
                peak = state["max_exp_avg_sq"] = xp.zeros_like(p)
        elif is_cupy(xp):  # (the fused kernel has no running maximum)
            _adam_fused(p, grad, state, h, self.decoupled)
            return
        if wd != 0.0:
            if self.decoupled:
                p *= 1.0 - lr * wd
            else:
                grad = grad + wd * p
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        if type(p) is np.ndarray and type(grad) is np.ndarray and type(exp_avg) is np.ndarray:
            _adam_host(p, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, float(state["step"]),
                       peak)
            return
        # exp_avg.lerp_(grad, 1 - beta1), with torch's two-sided lerp formula.
        weight = 1.0 - beta1
        if weight < 0.5:
            exp_avg += weight * (grad - exp_avg)
        else:
            exp_avg[...] = grad - (grad - exp_avg) * (1.0 - weight)
        exp_avg_sq *= beta2
        exp_avg_sq += (1.0 - beta2) * grad * grad
        step = float(state["step"])
        bias_correction1 = 1.0 - beta1 ** step
        bias_correction2 = 1.0 - beta2 ** step
        step_size = lr / bias_correction1
        if peak is not None:
            xp.maximum(peak, exp_avg_sq, out=peak)
        denom = xp.sqrt(exp_avg_sq if peak is None else peak) / bias_correction2 ** 0.5
        denom += eps
        p += (-step_size) * (exp_avg / denom)


def _adam_host(p: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray,
               lr: float, beta1: float, beta2: float, eps: float, step: float,
               peak: np.ndarray | None = None) -> None:
    """``Adam.apply_single`` on host arrays, in place: the same operations on the same operands
    in the same order (so the same bits), each written into one scratch array or the state
    (``out=``) instead of a fresh temporary (seven parameter-sized allocations per update)."""
    weight = 1.0 - beta1
    t = np.subtract(grad, exp_avg)
    if weight < 0.5:
        t *= weight
        exp_avg += t
    else:
        t *= 1.0 - weight
        np.subtract(grad, t, out=exp_avg)
    exp_avg_sq *= beta2
    np.multiply(grad, 1.0 - beta2, out=t)
    t *= grad
    exp_avg_sq += t
    bias_correction1 = 1.0 - beta1 ** step
    bias_correction2 = 1.0 - beta2 ** step
    step_size = lr / bias_correction1
    if peak is not None:  # amsgrad: the running maximum of the second moment
        np.maximum(peak, exp_avg_sq, out=peak)
    np.sqrt(exp_avg_sq if peak is None else peak, out=t)
    t /= bias_correction2 ** 0.5
    t += eps
    np.divide(exp_avg, t, out=t)
    t *= -step_size
    p += t


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW): ``p *= 1 - lr * wd`` first."""

    decoupled = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused)


def _checked(name: str, hyper: dict[str, Any], nonneg: Sequence[str] = (),
             positive: Sequence[str] = (), unit: Sequence[str] = ()) -> dict[str, Any]:
    """Hyper-parameters as floats: ``nonneg`` finite and >= 0, ``positive`` finite and > 0,
    ``unit`` in [0, 1]; bools stay bools."""
    out: dict[str, Any] = {}
    for key, value in hyper.items():
        if isinstance(value, bool | np.bool_):
            out[key] = bool(value)
            continue
        v = _number(name, key, value)
        if key in nonneg and not 0.0 <= v < float("inf"):
            raise OptimizerError(f"{name}: {key} must be finite and >= 0, found {v}")
        if key in positive and not 0.0 < v < float("inf"):
            raise OptimizerError(f"{name}: {key} must be finite and > 0, found {v}")
        if key in unit and not 0.0 <= v <= 1.0:
            raise OptimizerError(f"{name}: {key} must be in [0, 1], found {v}")
        out[key] = v
    return out


class RMSprop(Optimizer):
    """RMSprop (torch.optim.RMSprop): ``v = alpha v + (1 - alpha) g^2``; the step divides by
    ``sqrt(v) + eps`` (``sqrt(v - mean_g^2) + eps`` when ``centered``), through a momentum
    buffer when ``momentum > 0``."""

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False
                 ) -> None:
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps,
                                  "weight_decay": weight_decay, "momentum": momentum,
                                  "centered": centered})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _checked("RMSprop", hyper, nonneg=("lr", "eps", "weight_decay", "momentum"),
                        unit=("alpha",))

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        state = {"square_avg": xp.zeros_like(param.array)}
        if self.hyper["momentum"] > 0:
            state["momentum_buffer"] = xp.zeros_like(param.array)
        if self.hyper["centered"]:
            state["grad_avg"] = xp.zeros_like(param.array)
        return state

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.array
        xp = namespace_of(p)
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        square_avg = state["square_avg"]
        square_avg *= h["alpha"]
        square_avg += (1.0 - h["alpha"]) * (grad * grad)
        if h["centered"]:
            grad_avg = state.setdefault("grad_avg", xp.zeros_like(p))
            grad_avg += (1.0 - h["alpha"]) * (grad - grad_avg)  # lerp_(grad, 1 - alpha)
            avg = xp.sqrt(square_avg - grad_avg * grad_avg)
        else:
            avg = xp.sqrt(square_avg)
        avg += h["eps"]
        if h["momentum"] > 0:
            buf = state.setdefault("momentum_buffer", xp.zeros_like(p))
            buf *= h["momentum"]
            buf += grad / avg
            p += (-h["lr"]) * buf
        else:
            p += (-h["lr"]) * (grad / avg)


class Adagrad(Optimizer):
    """Adagrad (torch.optim.Adagrad): ``sum += g^2``; ``p -= clr * g / (sqrt(sum) + eps)`` with
    ``clr = lr / (1 + (step - 1) * lr_decay)``."""

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10) -> None:
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value,
                                  "eps": eps})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _checked("Adagrad", hyper, nonneg=("lr", "lr_decay", "weight_decay",
                                                  "initial_accumulator_value", "eps"))

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        total = xp.zeros_like(param.array)
        total += self.hyper["initial_accumulator_value"]
        return {"sum": total}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.array
        xp = namespace_of(p)
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        clr = h["lr"] / (1 + (float(state["step"]) - 1) * h["lr_decay"])
        total = state["sum"]
        total += grad * grad
        std = xp.sqrt(total)
        std += h["eps"]
        p += (-clr) * (grad / std)


class Adadelta(Optimizer):
    """Adadelta (torch.optim.Adadelta): running averages of squared gradients and squared
    updates; ``delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g``, ``p -= lr * delta``.
    """

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps,
                                  "weight_decay": weight_decay})

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _checked("Adadelta", hyper, nonneg=("lr", "eps", "weight_decay"), unit=("rho",))

    def init_single(self, param: Any) -> dict[str, Any]:
        xp = namespace_of(param.array)
        return {"square_avg": xp.zeros_like(param.array), "acc_delta": xp.zeros_like(param.array)}

    def apply_single(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        h = self.hyper
        p = param.array
        xp = namespace_of(p)
        rho, eps = h["rho"], h["eps"]
        if h["weight_decay"] != 0.0:
            grad = grad + h["weight_decay"] * p
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        square_avg *= rho
        square_avg += (1.0 - rho) * (grad * grad)
        std = xp.sqrt(square_avg + eps)
        delta = xp.sqrt(acc_delta + eps)
        delta /= std
        delta *= grad
        acc_delta *= rho
        acc_delta += (1.0 - rho) * (delta * delta)
        p += (-h["lr"]) * delta


class LBFGS(Optimizer):
    """L-BFGS (torch.optim.LBFGS; ``line_search_fn=None`` or ``"strong_wolfe"``, torch's
    bracketing and cubic-interpolation zoom): ``step(closure)`` re-evaluates the
    loss through ``closure`` (which zeroes the gradients, computes the loss, calls
    ``backward`` and returns it) up to ``max_iter`` times, moving along the two-loop-recursion
    direction from the last ``history_size`` curvature pairs. The whole parameter set is one
    flat vector, so there is one group; the curvature history is not part of ``state_dict``
    (it holds only the step count and hyper-parameters).
    """

    def __init__(self, params: Any, lr: float = 1.0, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if line_search_fn not in (None, "strong_wolfe"):
            raise OptimizerError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', found "
                                 f"{line_search_fn!r}")
        self.line_search_fn = line_search_fn
        for key, value in (("max_iter", max_iter), ("history_size", history_size)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise OptimizerError(f"LBFGS: {key} must be an int >= 1, found {value!r}")
        evals = max_iter * 5 // 4 if max_eval is None else max_eval
        super().__init__(params, {"lr": lr, "max_iter": float(max_iter),
                                  "max_eval": float(evals), "tolerance_grad": tolerance_grad,
                                  "tolerance_change": tolerance_change,
                                  "history_size": float(history_size)})
        if len(self.param_groups) != 1:
            raise OptimizerError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._memory: dict[str, Any] = {"func_evals": 0, "n_iter": 0}

    def check_hyper(self, hyper: dict[str, Any]) -> dict[str, Any]:
        return _checked("LBFGS", hyper, nonneg=("lr", "tolerance_grad", "tolerance_change"),
                        positive=("max_iter", "max_eval", "history_size"))

    def init_single(self, param: Any) -> dict[str, Any]:
        return {}

    def _flat_grad(self) -> Any:
        parts = []
        for p in self.params:
            g = p.grad
            if g is None:
                parts.append(np.zeros(int(np.prod(p.shape)), dtype=p.dtype))
            else:
                g = g.detach().numpy() if hasattr(g, "detach") else to_host(g)
                parts.append(np.asarray(g, dtype=p.dtype).reshape(-1))
        return np.concatenate(parts)

    def _add(self, t: float, d: Any) -> None:
        """``p += t * d`` for each parameter's slice of the flat direction ``d``."""
        offset = 0
        for p in self.params:
            n = int(np.prod(p.shape))
            data = p.array
            step = (t * d[offset:offset + n]).reshape(p.shape).astype(data.dtype)
            data += to_device(step, namespace_of(data))
            p.mark_updated()
            offset += n

    def _set_params(self, values: list[Any]) -> None:
        for p, v in zip(self.params, values, strict=True):
            data = p.array
            data[...] = to_device(v.astype(data.dtype), namespace_of(data))
            p.mark_updated()

    def _directional_evaluate(self, closure: Any, x: list[Any], t: float, d: Any
                              ) -> tuple[float, Any]:
        """The loss and flat gradient at ``x + t d``; the parameters are put back to ``x``."""
        self._add(t, d)
        with enable_grad():
            loss = float(closure())
        flat_grad = self._flat_grad()
        self._set_params(x)
        return loss, flat_grad

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """One L-BFGS step (torch's algorithm, iteration by iteration); returns the loss the
        first closure call gave."""
        if not callable(closure):
            raise OptimizerError("LBFGS.step: requires a closure that reevaluates the model and "
                                 f"returns the loss, found {type(closure).__name__}")
        h = self.hyper
        lr, max_iter, max_eval = h["lr"], int(h["max_iter"]), int(h["max_eval"])
        tol_grad, tol_change = h["tolerance_grad"], h["tolerance_change"]
        history = int(h["history_size"])
        mem = self._memory
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        mem["func_evals"] += 1
        flat_grad = self._flat_grad()
        self.step_count += 1
        if np.abs(flat_grad).max() <= tol_grad:
            return orig_loss
        # The previous step's direction, step length and curvature history (torch keeps them).
        d: Any = mem.get("d")
        t: Any = mem.get("t")
        old_dirs: Any = mem.get("old_dirs")
        old_stps: Any = mem.get("old_stps")
        ro: Any = mem.get("ro")
        h_diag: Any = mem.get("H_diag")
        prev_flat_grad: Any = mem.get("prev_flat_grad")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            mem["n_iter"] += 1
            if mem["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = float(y @ s)
                if ys > 1e-10:
                    if len(old_dirs) == history:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float(y @ y)
                al = [0.0] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = float(old_stps[i] @ q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = float(old_dirs[i] @ r) * ro[i]
                    r = r + (al[i] - be_i) * old_stps[i]
                d = r
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            t = (min(1.0, 1.0 / float(np.abs(flat_grad).sum())) * lr if mem["n_iter"] == 1
                 else lr)
            gtd = float(flat_grad @ d)
            if gtd > -tol_change:
                break
            evals = 0
            if self.line_search_fn == "strong_wolfe":
                x_init = [np.array(to_host(p.array), copy=True) for p in self.params]
                loss, flat_grad, t, evals = _strong_wolfe(
                    lambda x, step, direction: self._directional_evaluate(closure, x, step,
                                                                          direction),
                    x_init, t, d, loss, flat_grad, gtd, tolerance_change=tol_change)
                self._add(t, d)
                opt_cond = bool(np.abs(flat_grad).max() <= tol_grad)
            else:
                self._add(t, d)
                opt_cond = False
            if n_iter != max_iter and self.line_search_fn is None:
                with enable_grad():
                    loss = float(closure())
                flat_grad = self._flat_grad()
                opt_cond = bool(np.abs(flat_grad).max() <= tol_grad)
                evals = 1
            current_evals += evals
            mem["func_evals"] += evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        mem.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                   prev_flat_grad=prev_flat_grad)
        return orig_loss


def _cubic_interpolate(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                       bounds: tuple[float, float] | None = None) -> float:
    """The minimiser of the cubic through two points with their slopes, clipped to
    ``bounds`` (torch.optim.lbfgs's; the midpoint when the cubic has no minimum)."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return float(min(max(min_pos, lo), hi))
    return (lo + hi) / 2.0


def _strong_wolfe(obj_func: Any, x: Any, t: float, d: Any, f: float, g: Any, gtd: float,
                  c1: float = 1e-4, c2: float = 0.9, tolerance_change: float = 1e-9,
                  max_ls: int = 25) -> tuple[float, Any, float, int]:
    """torch.optim.lbfgs._strong_wolfe: bracket a step satisfying the strong Wolfe conditions,
    then zoom in by cubic interpolation; returns (loss, flat grad, step, evaluations)."""
    d_norm = float(np.abs(d).max())
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = float(g_new @ d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    bracket: list[float] = []
    bracket_f: list[float] = []
    bracket_g: list[Any] = []
    bracket_gtd: list[float] = []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = float(g_new @ d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1],
                               bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) \
                    else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = float(g_new @ d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


# ---------------------------------------------------------------------------------------------
# Fused CuPy kernels: one launch per parameter and step instead of one per array operation.
# Each is the xp formula above line by line: the same operations in the same order, the
# host-computed scalars rounded to the parameter's dtype exactly as NumPy rounds a Python float
# mixed with a float32 array, and ``--fmad=false`` so that NVRTC does not contract a * b + c into
# one fused multiply-add (which rounds once, where NumPy rounds twice). Built on first use and
# cached (CuPy compiles once per dtype and device). Not exercised without a GPU: the test suite
# runs the xp formulas on its stand-in device.

_KERNELS: dict[str, Any] = {}
_NO_FMA = ("--fmad=false",)

_SGD_PLAIN = """
T d = g;
if (has_wd) d = d + wd * p;
p = p + neg_lr * d;
"""

_SGD_MOMENTUM = """
T d = g;
if (has_wd) d = d + wd * p;
if (first) {
    buf = d;
} else {
    buf = buf * momentum;
    buf = buf + damp1 * d;
}
d = nesterov ? d + momentum * buf : buf;
p = p + neg_lr * d;
"""

_ADAM = """
T d = g;
if (wd_mode == 2) p = p * decay;
else if (wd_mode == 1) d = d + wd * p;
if (low) m = m + w1 * (d - m);
else m = d - (d - m) * one_minus_w1;
v = v * beta2;
v = v + c2 * d * d;
T denom = sqrt(v) / bc2_sqrt;
denom = denom + eps;
p = p + neg_step * (m / denom);
"""


def _kernel(name: str) -> Any:
    kernel = _KERNELS.get(name)
    if kernel is None:
        import cupy  # type: ignore[import-not-found]

        if name == "sgd":
            kernel = cupy.ElementwiseKernel(
                "T g, T wd, T neg_lr, int32 has_wd", "T p", _SGD_PLAIN,
                "torchlean_sgd", options=_NO_FMA)
        elif name == "sgd_momentum":
            kernel = cupy.ElementwiseKernel(
                "T g, T wd, T neg_lr, T momentum, T damp1, int32 has_wd, int32 first, "
                "int32 nesterov", "T p, T buf", _SGD_MOMENTUM, "torchlean_sgd_momentum",
                options=_NO_FMA)
        else:
            kernel = cupy.ElementwiseKernel(
                "T g, T decay, T wd, T w1, T one_minus_w1, T beta2, T c2, T bc2_sqrt, T eps, "
                "T neg_step, int32 wd_mode, int32 low", "T p, T m, T v", _ADAM, "torchlean_adam",
                options=_NO_FMA)
        _KERNELS[name] = kernel
    return kernel


def _sgd_fused(p: Any, grad: Any, state: dict[str, Any], h: dict[str, Any]) -> None:
    """``SGD.apply_single`` on CuPy as one kernel (``p`` and the buffer updated in place)."""
    dt = p.dtype.type
    wd, has_wd, neg_lr = dt(h["weight_decay"]), int(h["weight_decay"] != 0.0), dt(-h["lr"])
    if h["momentum"] == 0.0:
        _kernel("sgd")(grad, wd, neg_lr, has_wd, p)
        return
    _kernel("sgd_momentum")(grad, wd, neg_lr, dt(h["momentum"]), dt(1.0 - h["dampening"]),
                            has_wd, int(int(state["step"]) == 1), int(h["nesterov"]), p,
                            state["momentum_buffer"])


def _adam_fused(p: Any, grad: Any, state: dict[str, Any], h: dict[str, Any],
                decoupled: bool) -> None:
    """``Adam.apply_single`` (and AdamW's) on CuPy as one kernel."""
    dt = p.dtype.type
    lr, beta1, beta2, eps, wd = h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]
    step = float(state["step"])
    weight = 1.0 - beta1
    wd_mode = 0 if wd == 0.0 else (2 if decoupled else 1)
    _kernel("adam")(grad, dt(1.0 - lr * wd), dt(wd), dt(weight), dt(1.0 - weight), dt(beta2),
                    dt(1.0 - beta2), dt((1.0 - beta2 ** step) ** 0.5), dt(eps),
                    dt(-(lr / (1.0 - beta1 ** step))), wd_mode, int(weight < 0.5), p,
                    state["exp_avg"], state["exp_avg_sq"])
