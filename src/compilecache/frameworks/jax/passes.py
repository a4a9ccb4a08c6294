"""XLA compiler passes the program registers, which JAX's cache key does not hold.

``jax.extend.xla.register_hlo_module_transformation`` (jaxlib 0.10.2 on) adds a pass that XLA
runs on every module it compiles in the process. JAX's key is computed from the module before
the pass, so an executable compiled with a pass has the key of one compiled without it: JAX's
own cache serves either to the other. :class:`Passes` watches jaxlib's registration functions;
while a pass is registered, the key of every compile is made anew from JAX's and the passes'
digest (:meth:`Passes.keyed`), and a stored trace is served only where the same passes are
registered (:meth:`Passes.digest` is one of its key's components).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from compilecache.frameworks.jax import guards as jax_guards
from compilecache.patches import Patches

# jaxlib's functions: (name, stage, callback), the same after a client; clear: (name, stage).
_REGISTER = ("register_xla_transform", "register_xla_transform_c_api")
_CLEAR = ("clear_xla_transform", "clear_xla_transform_c_api")


class Passes:
    """The passes registered in this process, by name and stage, each with its callback's
    digest (a function of the program's by its code and the values it reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered: dict[tuple[str, int], str] = {}

    def install(self, patches: Patches, xla: Any) -> None:
        """Watch ``xla``'s (jaxlib's ``_xla``) registration functions; nothing where it has
        none (an older jaxlib)."""
        for name in _REGISTER:
            if callable(getattr(xla, name, None)):
                patches.wrap(xla, name, self._registering)
        for name in _CLEAR:
            if callable(getattr(xla, name, None)):
                patches.wrap(xla, name, self._clearing)

    def digest(self) -> str:
        """The registered passes' digest; ``""`` when none is registered."""
        with self._lock:
            if not self._registered:
                return ""
            text = "\0".join(f"{n}\0{s}\0{d}" for (n, s), d in sorted(self._registered.items()))
        return hashlib.sha256(text.encode()).hexdigest()

    def keyed(self, key: str) -> str:
        """JAX's ``key`` for a compile in this process: the same where no pass is registered,
        else a key of the same form (``<module>-<hash>``) made from it and the passes."""
        passes = self.digest()
        if not passes:
            return key
        module, _, hashed = key.rpartition("-")
        return f"{module}-{hashlib.sha256((hashed + chr(0) + passes).encode()).hexdigest()}"

    def _registering(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def register(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                # (name, stage, callback), after a client in the C API's form.
                *_, name, stage, callback = args
                entry, digest = (str(name), int(stage)), _callback_digest(callback)
            except Exception:  # called otherwise: a pass no other process can match
                entry, digest = (_unique(), 0), _unique()
            with self._lock:
                self._registered[entry] = digest
            return result

        return register

    def _clearing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def clear(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if result is True and len(args) >= 2:  # it was there, and is gone
                with self._lock:
                    self._registered.pop((str(args[-2]), args[-1]), None)
            return result

        return clear


def _callback_digest(callback: Any) -> str:
    """``callback`` by value where the guards can compare it; else a value no other process
    has, so that nothing compiled with it is served elsewhere (nor anything else to it)."""
    return jax_guards.value_digest("the pass", callback) or _unique()


def _unique() -> str:
    return f"unique {os.getpid()} {time.time_ns()}"


# One per process: passes are registered with jaxlib for the whole process.
PASSES = Passes()
