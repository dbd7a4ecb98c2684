"""``nn.ModuleList`` and ``nn.ModuleDict``: sub-modules held in a list or a dict, registered.

A plain Python list of layers hides their parameters from ``parameters()``, ``state_dict`` and
``to``; these containers register each entry under torch's names (``"0"``, ``"1"``, ... for a
list, the key for a dict), so ``layers.3.weight`` is the same key a torch checkpoint uses. They
have no ``forward``: the owning module decides how its entries are called.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..core.errors import IndexRangeError, TorchLeanError
from .modules import Module

__all__ = ["ModuleDict", "ModuleList"]


def _module(owner: str, value: Any) -> Module:
    if not isinstance(value, Module):
        raise TorchLeanError(f"{owner}: expected a Module, found {type(value).__name__}")
    return value


class ModuleList(Module):
    """A list of modules, registered as ``"0"``, ``"1"``, ... in order."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _position(self, index: Any) -> int:
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TorchLeanError(f"ModuleList: index with an int or a slice, found {index!r}")
        n = len(self._modules)
        if not -n <= index < n:
            raise IndexRangeError(f"ModuleList: index {index} is out of range for {n} modules")
        return int(index) % n

    def _renumber(self, modules: list[Module]) -> None:
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def __repr__(self) -> str:
        """torch's: runs of identical entries collapse to ``(0-3): 4 x Linear(...)``."""
        reprs = [repr(m) for m in self._modules.values()]
        if not reprs:
            return f"{type(self).__name__}()"
        runs: list[list[Any]] = [[0, 0, reprs[0]]]
        for i, r in enumerate(reprs[1:], 1):
            if r == runs[-1][2]:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}").replace(
            "\n", "\n  ") for a, b, r in runs]
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return list(self._modules.values())[self._position(index)]

    def __setitem__(self, index: Any, module: Module) -> None:
        self._modules[str(self._position(index))] = _module("ModuleList", module)

    def __delitem__(self, index: Any) -> None:
        modules = list(self._modules.values())
        if isinstance(index, slice):
            del modules[index]
        else:
            del modules[self._position(index)]
        self._renumber(modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        self._modules[str(len(self._modules))] = _module("ModuleList.append", module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        if isinstance(modules, Module) and not isinstance(modules, ModuleList):
            raise TorchLeanError("ModuleList.extend: expected an iterable of modules, found a "
                                 f"single {type(modules).__name__}")
        for m in list(modules):
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        modules = list(self._modules.values())
        modules.insert(int(index), _module("ModuleList.insert", module))
        self._renumber(modules)


class ModuleDict(Module):
    """An ordered dict of modules, registered under their keys."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None
                 ) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    @staticmethod
    def _key(key: Any) -> str:
        if not isinstance(key, str) or not key or "." in key:
            raise TorchLeanError(f"ModuleDict: keys must be non-empty strings without '.', found "
                                 f"{key!r}")
        return key

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(key)
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self._modules[self._key(key)] = _module("ModuleDict", module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> list[str]:
        return list(self._modules.keys())

    def values(self) -> list[Module]:
        return list(self._modules.values())

    def items(self) -> list[tuple[str, Module]]:
        return list(self._modules.items())

    def pop(self, key: str) -> Module:
        return self._modules.pop(key)

    def clear(self) -> None:
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for pair in pairs:
            if not (isinstance(pair, tuple | list) and len(pair) == 2):
                raise TorchLeanError(f"ModuleDict.update: expected (key, module) pairs, found "
                                     f"{pair!r}")
            self[pair[0]] = pair[1]
