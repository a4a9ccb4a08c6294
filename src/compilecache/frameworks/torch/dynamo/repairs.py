"""Where torch's ``caching_precompile`` machinery fails on real models, and what mends it.

Each was met on transformers' GPT-2 or Llama with torch 2.13: a getter torch cannot name, a
wrapped function its guard pickler saves as missing, a decorated function's globals installed
where its code does not look, a module global it does not record. :func:`unprovided_global`
refuses what is still broken before it is stored.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import re
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any

# The names Dynamo numbers with its per-process counter (``unique_id``) that a loaded package
# puts in a module's globals: resume functions, its builtins dict, compiled backends.
_NUMBERED = re.compile(rb"(?:__resume_at_[0-9]+|__builtins_dict__|__compiled_fn)_([0-9]+)")


def advance_unique_ids(payload: bytes) -> None:
    """Move Dynamo's name counter past the numbers a loaded package uses: a later compile in
    this process would otherwise pick the same global name ("already exists in scope")."""
    numbers = [int(m.group(1)) for m in _NUMBERED.finditer(payload)]
    if not numbers:
        return
    transform: Any = importlib.import_module("torch._dynamo.bytecode_transformation")
    counter = transform._unique_id_counter
    transform._unique_id_counter = itertools.count(max(next(counter), max(numbers) + 1))


def frame_globals(fn: Any) -> dict[str, Any]:
    """The globals the compiled function's code reads: its ``__globals__`` (a bound method's
    function's), which is not its ``__module__``'s when a decorator copied ``__module__``
    (``functools.wraps``)."""
    globals_: dict[str, Any] = getattr(fn, "__func__", fn).__globals__
    return globals_


# The globals Dynamo makes for the code it writes: a package must install each one it reads.
_GENERATED = re.compile(r"^(?:___|__compiled_fn|__resume_at|__import_|__builtins_dict__)")


def unprovided_global(package: Any) -> str:
    """A global Dynamo made that a frame's transformed code reads and that the package would
    not install in another process (where the frame would raise NameError), or ``""``."""
    codes = package._codes
    installed: dict[str, set[str]] = {}
    for entry in codes.values():
        names = installed.setdefault(entry.python_module, set())
        names |= set(entry.import_sources) | set(entry.backend_ids)
        if entry.install_to_global:
            names |= set(entry.function_names)
    root = package._innermost_fn
    for code, entry in codes.items():
        # Where the frame's code finds its globals: a resume function's and a user function's
        # in their module; the compiled function's in frame_globals.
        module = entry.python_module
        provided = installed.get(module, set())
        if code is root.__code__:
            module = frame_globals(root).get("__name__", module)
            provided = installed.get(module, set()) | set(entry.import_sources)
            provided |= set(entry.backend_ids)
        for guarded in entry.guarded_codes:
            serialized = guarded.dynamo_code
            for name in _names_read(serialized.co_names, serialized.co_consts):
                # torch's install puts its builtins dict back (from the saved guards).
                generated = _GENERATED.match(name) and not name.startswith("__builtins_dict__")
                if generated and name not in provided:
                    return f"its code reads {name}, which torch does not save"
    return ""


def install_root_globals(package: Any) -> None:
    """torch installs the compiled function's imports and compiled graphs into its
    ``__module__``; its code reads them from its ``__globals__``, another module's when a
    decorator copied ``__module__`` (transformers' Llama: NameError ``__import_torch_dot_nn...``,
    ``__compiled_fn_1_...``). They go there too."""
    root = package._innermost_fn
    entry = package._codes.get(root.__code__)
    name = frame_globals(root).get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    if entry is None or module is None or name == entry.python_module:
        return
    where = sys.modules[entry.python_module].__dict__
    for alias in [*entry.import_sources, *entry.backend_ids]:
        if alias in where and alias not in module.__dict__:
            package._install_global(module, alias, where[alias])


def _names_read(names: Iterable[str], consts: Iterable[Any]) -> Iterable[str]:
    yield from names
    for const in consts:
        inner_names = getattr(const, "co_names", None)
        if inner_names is not None:
            yield from _names_read(inner_names, getattr(const, "co_consts", ()))


def saved_as_missing(reduced: Any) -> bool:
    """Whether torch's guard pickler gave up on an object (saved it as ``_Missing``)."""
    return (
        isinstance(reduced, tuple)
        and len(reduced) == 2
        and getattr(reduced[0], "__name__", "") == "_Missing"
    )


def wrapped_path(fn: types.FunctionType) -> tuple[str, str, int] | None:
    """``(module, qualified name, n)`` where ``fn`` is what that name holds after ``n`` steps of
    ``__wrapped__``; ``None`` where it is not."""
    found: Any = sys.modules.get(fn.__module__)
    for part in fn.__qualname__.split("."):
        found = getattr(found, part, None)
    for depth in range(8):
        if found is fn:
            return fn.__module__, fn.__qualname__, depth
        found = getattr(found, "__wrapped__", None)
        if found is None:
            return None
    return None


def unwrapped(module: str, qualname: str, depth: int) -> Any:
    """The function :func:`wrapped_path` named (called by pickle, loading a package's guards)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    for _ in range(depth):
        found = found.__wrapped__
    return found


def property_accessor(module: types.ModuleType | None, code: types.CodeType) -> str | None:
    """``fget.__code__`` (or ``fset``, ``fdel``) where ``code`` is a property's accessor, found
    by its qualified name in ``module`` without running any getter; else ``None``."""
    if module is None:
        return None
    found: Any = module
    for part in code.co_qualname.split("."):
        found = inspect.getattr_static(found, part, None)
        if found is None:
            return None
    if not isinstance(found, property):
        return None
    for accessor in ("fget", "fset", "fdel"):
        if getattr(getattr(found, accessor), "__code__", None) is code:
            return f"{accessor}.__code__"
    return None


def forget_incomparable_export_ref(guard: Any, obj_weakref: object) -> None:
    """Let ``Guard.set_export_info`` take ``obj_weakref`` where its sanity check cannot compare
    it with the reference it holds. Under caching_precompile Dynamo builds every guard twice
    (once to filter out the guards the mode drops), and the second build checks the guarded
    object's weak reference against the first with ``==``. Where the source makes a new object
    each time (a NumPy array read as a tensor), that compares two live tensors and raises
    ("Boolean value of Tensor ... is ambiguous") into the program. The reference is export
    information only: the guard's check code is not touched."""
    held = getattr(guard, "obj_weakref", None)
    if held is None or held is obj_weakref:
        return
    if not isinstance(held, weakref.ref) or not isinstance(obj_weakref, weakref.ref):
        return
    try:
        bool(held == obj_weakref)
    except Exception:
        guard.obj_weakref = None
