"""What the library modules a trace ran bind to their names: a fingerprint, compared before a
stored trace is served.

A trace runs JAX's code and the standard library's, trusted by their versions. What that code
calls is looked up by name at run time, in its module's globals, in its classes, and in its
registries (dicts of rules, such as JAX's lowering rules by primitive). A program can rebind
any of them (``lax.mul = lax.add``, ``Tracer.__mul__ = ...``, ``copy.deepcopy = mine``, a
lowering rule registered for a primitive, a constructor added to a parser's registry), and JAX
then traces or lowers something else. So the entry of a trace keeps, for each module whose code
ran during it, a digest of what those names hold: each function, class or callable by its
qualified name (and for a closure or a ``functools.partial``, what it holds); where one differs
here, the trace is not served.

Program code found in JAX's lowering registries refuses the record outright: a lowering rule
runs while the trace is lowered, which a served trace skips, and nothing guards what it reads.

Describing a module costs a few milliseconds for JAX's largest, so each module's digest is kept
for the process with the ids of what its globals and the dicts it was described from hold, and is
described again only where one of those changed (checking them costs about 10 us a module).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

# JAX's modules whose registries decide how a trace is lowered: fingerprinted for every trace,
# whether or not its trace ran their code (lowering runs after the trace).
LOWERING_MODULES = ("jax._src.interpreters.mlir",)
_LOWERING_REGISTRIES = ("_lowerings", "_platform_specific_lowerings")

_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_WRAPPERS = (staticmethod, classmethod)


@dataclasses.dataclass
class _Known:
    """A module's digest, and what tells whether it still holds: the ids of its globals and of
    what the dicts it was described from hold (its classes' namespaces, its registries)."""

    top: tuple[int, ...]
    watched: list[Any]
    ids: tuple[int, ...]
    digest: str


_KNOWN: dict[str, _Known] = {}


def module_digest(name: str) -> str:
    """The digest of what module ``name`` binds (``""`` where it is not imported)."""
    module = sys.modules.get(name)
    if module is None:
        return ""
    namespace = vars(module)
    top = tuple(map(id, list(namespace.values())))
    known = _KNOWN.get(name)
    if known is not None and known.top == top and _ids(known.watched) == known.ids:
        return known.digest
    watched = _watched(namespace, name)
    ids = _ids(watched)
    parts: list[str] = []
    _describe(module, name, parts.append)
    digest = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    _KNOWN[name] = _Known(top, watched, ids, digest)
    return digest


def _ids(watched: list[Any]) -> tuple[int, ...]:
    return tuple(itertools.chain.from_iterable(map(id, list(d.values())) for d in watched))


def _watched(namespace: dict[str, Any], name: str) -> list[Any]:
    """The dicts :func:`_describe` reads besides the module's globals: the namespaces of the
    classes defined in it and their dicts, its dicts and the dicts they hold."""
    watched: list[Any] = []
    for value in list(namespace.values()):
        if isinstance(value, type) and value.__module__ == name:
            own = vars(value)
            watched.append(own)
            for table in [v for v in list(own.values()) if type(v) is dict]:
                watched.append(table)
                watched.extend(v for v in list(table.values()) if isinstance(v, dict))
        elif isinstance(value, dict):
            watched.append(value)
            watched.extend(v for v in list(value.values()) if isinstance(v, dict))
    return watched


def _describe(module: types.ModuleType, name: str, say: Callable[[str], None]) -> None:
    """Say what the module's definitions are bound to now: each name a function or class was
    defined (or imported) under (``def mul`` is ``mul``; bound to anything else, as by
    ``lax.mul = lax.add``, the name drops out), its classes' methods, and its dicts and its
    classes' dicts of functions (registries). Other names (aliases, a loop's last value, which
    can follow a set's per-process order) are left out: they are not the same in every
    process."""
    for key, value in sorted(list(vars(module).items()), key=lambda kv: str(kv[0])):
        if isinstance(value, dict):
            table = _table(value)
            if table != "{}":
                say(f"{key}: {table}")
        elif _defined_as(value, key):
            say(f"{key}: {identity(value)}")
            if isinstance(value, type) and value.__module__ == name:
                _describe_class(value, key, say)


def _describe_class(cls: type, key: str, say: Callable[[str], None]) -> None:
    for attribute, item in sorted(list(vars(cls).items()), key=lambda kv: str(kv[0])):
        inner = item.__func__ if isinstance(item, _WRAPPERS) else item
        if type(item) is dict:
            table = _table(item)
            if table != "{}":
                say(f"{key}.{attribute}: {table}")
        elif isinstance(inner, types.FunctionType):
            # Every method, by what it is and holds: JAX makes its operators in a loop, each a
            # closure named ``op`` holding its operator's name.
            say(f"{key}.{attribute}: {identity(item)}")


def _defined_as(value: object, key: str) -> bool:
    """Whether ``value`` is a function or class under the name it was defined with (defined
    in the module, or imported by that name)."""
    return isinstance(value, (type, types.FunctionType)) and value.__name__ == key


def _table(table: dict[Any, Any], depth: int = 0) -> str:
    """A dict's entries whose values are functions or callables (a registry), or dicts of
    them, in a stable order; ``{}`` where it holds none."""
    entries = []
    for key, value in list(table.items()):
        # Classes as values are a cache's (ctypes' pointer types, made as they are asked for):
        # what it holds follows the process's history. A registry holds functions.
        held = "" if isinstance(value, type) else identity(value)
        if not held and depth == 0 and isinstance(value, dict):
            held = _table(value, 1)
            held = "" if held == "{}" else held
        if held:
            entries.append(f"{_key(key)}={held}")
    return "{" + ", ".join(sorted(entries)) + "}"


def _key(key: object) -> str:
    if isinstance(key, (str, int, float, bool, type(None))):
        return repr(key)
    held = identity(key, 1)
    if held:
        return held
    # A primitive, a dtype: by its name where it has one, else by its type (a repr may hold
    # an address).
    named = getattr(key, "name", None)
    return f"{type(key).__qualname__}:{named if isinstance(named, str) else ''}"


def identity(value: object, depth: int = 0) -> str:
    """A function, class or callable by what it is in every process (``""`` for anything else):
    its module and qualified name, and for a closure or a partial what it holds."""
    if isinstance(value, _WRAPPERS):
        inner = identity(value.__func__, depth)
        return f"{type(value).__name__}({inner})" if inner else ""
    if isinstance(value, type):
        return f"class {value.__module__}.{value.__qualname__}"
    if isinstance(value, functools.partial):
        args = ", ".join(_argument(a, depth) for a in (*value.args, *value.keywords.values()))
        return f"partial({identity(value.func, depth + 1)}; {args})"
    if isinstance(value, _FUNCTIONS):
        described = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        if isinstance(value, types.MethodType):
            described += f" of {type(value.__self__).__qualname__}"
        cells = getattr(value, "__closure__", None)
        if cells and depth < 2:
            held = []
            for cell in cells:
                try:
                    held.append(_argument(cell.cell_contents, depth))
                except ValueError:  # an empty cell
                    held.append("-")
            described += f" [{', '.join(held)}]"
        return described
    parts = _parts(value) if depth == 0 else None
    if parts and any(callable(v) for v in parts):
        # A registry's entry holding a rule: JAX's LoweringRuleEntry(rule, inline).
        return f"{type(value).__qualname__}(" + ", ".join(_argument(v, depth) for v in parts) + ")"
    return ""


def _parts(value: object) -> list[Any] | None:
    """What a tuple or a dataclass instance holds (``None`` for anything else)."""
    if isinstance(value, tuple):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    return None


def _argument(value: object, depth: int) -> str:
    """What a closure or a partial holds: a callable by :func:`identity`, a plain value by its
    repr, anything else by its type."""
    held = identity(value, depth + 1)
    if held:
        return held
    if isinstance(value, (str, int, float, bool, type(None), bytes)):
        return repr(value)
    return f"<{type(value).__qualname__}>"


def program_rules(is_library: Callable[[types.CodeType], bool]) -> list[str]:
    """The primitives whose JAX lowering rule is (or holds) the program's own code."""
    module = sys.modules.get(LOWERING_MODULES[0])
    if module is None:
        return []
    found = []
    tables: list[dict[Any, Any]] = []
    for registry in _LOWERING_REGISTRIES:
        table = getattr(module, registry, None)
        if isinstance(table, dict):
            tables.append(table)
            tables.extend(t for t in list(table.values()) if isinstance(t, dict))
    for table in tables:
        for primitive, entry in list(table.items()):
            if isinstance(entry, dict):
                continue
            if any(not is_library(code) for code in _codes(entry, 0)):
                found.append(str(getattr(primitive, "name", primitive)))
    return sorted(set(found))


def _codes(value: object, depth: int) -> Iterable[types.CodeType]:
    """The code objects a registry's entry runs: its functions', and those of what its closures
    and partials hold (JAX's ``lower_fun`` wraps the program's function in a closure)."""
    if depth > 3:
        return
    parts = _parts(value)
    if parts is not None:
        for item in parts:
            yield from _codes(item, depth + 1)
    elif isinstance(value, functools.partial):
        yield from _codes(value.func, depth + 1)
        for item in (*value.args, *value.keywords.values()):
            yield from _codes(item, depth + 1)
    elif isinstance(value, types.FunctionType):
        yield value.__code__
        for cell in value.__closure__ or ():
            try:
                yield from _codes(cell.cell_contents, depth + 1)
            except ValueError:
                continue
    elif isinstance(value, types.MethodType):
        yield from _codes(value.__func__, depth + 1)
    elif callable(value) and not isinstance(value, (type, types.BuiltinFunctionType)):
        call = vars(type(value)).get("__call__")  # a callable object's class's own method
        if isinstance(call, types.FunctionType):
            yield call.__code__
