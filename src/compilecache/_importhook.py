"""Run a callback right after a module is imported, without importing it ourselves.

``compilecache.enable()`` must work before ``import jax`` without paying for that import in
processes that never use JAX (``compilecache run`` enables itself in every Python child). A
meta-path finder wraps the module's loader so the callback runs once the module has executed,
the way wrapt's post-import hooks do.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

Callback = Callable[[ModuleType], None]

_lock = threading.Lock()
_callbacks: dict[str, list[Callback]] = {}


class _ChainedLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self.inner = inner
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Hand the module its real loader back: some packages inspect __loader__.
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        _fire(self.name, module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._resolving: set[str] = set()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _callbacks or fullname in self._resolving:
            return None
        self._resolving.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._resolving.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _ChainedLoader(spec.loader, fullname)
        return spec


_finder = _PostImportFinder()


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _callbacks.pop(name, [])
    for callback in callbacks:
        callback(module)


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` now if ``name`` is imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    with _lock:
        _callbacks.setdefault(name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def cancel(name: str) -> None:
    """Forget pending callbacks for ``name``."""
    with _lock:
        _callbacks.pop(name, None)
