"""The guards Dynamo drops under ``caching_precompile``, named so another process can check them.

Dynamo's guards on object identity (ID_MATCH and what derives from it, CLOSURE_MATCH,
WEAKREF_ALIVE, DICT_VERSION) cannot be saved: an id means nothing in another process. A package
records, for each such guard, what its object is by name (:func:`identity`: a module by its
name, a function by its qualified name and code, a class, an enum member, a builtin), keyed by
the frame it guards (:func:`frame_key`). A load checks those reached from globals and closure
cells (:func:`resolve`), and each installed frame gets :class:`FrameGuards`, which checks them
all on every call.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import functools
import hashlib
import re
import struct
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# The guard kinds Dynamo drops under caching_precompile (torch/_dynamo/guards.py).
DROPPED = ("ID_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE", "DICT_VERSION")
# ... and the guards derived from these kinds.
DERIVED = ("ID_MATCH", "DICT_VERSION")
# Where a guard's source starts, as Dynamo names it: a global (G['name']), a local or argument of
# the guarded frame (L['name'], or the bare name in torch's filter entries; a cell of the
# compiled function's closure is one of its frame's locals), then .attr or ['key'] steps.
GLOBAL_ROOT = re.compile(r"G\['([^'\\]+)'\]")
LOCAL_ROOT = re.compile(r"L\['([^'\\]+)'\]")
NAME_ROOT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)")
# What wraps a source in Dynamo's names (``type(x)``, ``dict(x)``, ``dict.__getitem__(x, k)``).
CALLS_AROUND = re.compile(r"^(?:(?:type|dict|list|dict\.[a-z_]+|list\.[a-z_]+)\()+")
# A source expression: names, attributes, subscripts, calls and literals; no lambdas,
# comprehensions, operators or statements.
_SOURCE = re.compile(r"^[A-Za-z0-9_\[\]\(\)\.,']+$")
_SOURCE_BUILTINS: dict[str, Any] = {
    "type": type,
    "dict": dict,
    "list": list,
    "tuple": tuple,
    "len": len,
    "getattr": getattr,
    "object": object,
}
BUILTINS_ALIAS = re.compile(r"^__builtins_dict___[0-9]+$")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Unverifiable(Exception):
    """A dropped guard whose object cannot be named in another process."""


def identity(value: object) -> str:
    """What a global object is, by name, the same in every process that has the same one."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, types.FunctionType):
        digest = code_digest(value.__code__)
        return f"function {value.__module__}.{value.__qualname__} {digest}"
    if isinstance(value, types.CodeType):
        return f"code {value.co_qualname} {code_digest(value)}"
    if isinstance(value, enum.Enum):
        # With its value: an IntEnum's or a str Enum's member is used as its value, unguarded.
        kind = type(value)
        found = fingerprint(value._value_)
        held = found if found is not None else f"~{type(value._value_).__qualname__}"
        return f"enum {kind.__module__}.{kind.__qualname__}.{value.name} {held}"
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        cls = value.__objclass__
        return f"method {cls.__module__}.{cls.__qualname__}.{value.__name__}"
    if isinstance(value, type):
        state = _class_state(value) + _registrations(value)
        return f"type {value.__module__}.{value.__qualname__}{state}"
    if isinstance(value, types.BuiltinFunctionType):
        # A module's builtin (len, torch._C._nn.gelu), not a method bound to some object.
        owner = getattr(value, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            return f"builtin {value.__module__}.{value.__qualname__}"
    raise Unverifiable(f"{type(value).__name__} object")


def own_source(module: str) -> bool:
    """Whether ``module``'s source is checked when a guard knows one of its objects by name:
    not the standard library's, nor torch's (the key holds their versions)."""
    top = module.partition(".")[0]
    return top not in sys.stdlib_module_names and top not in ("torch", "builtins")


def _registrations(cls: type) -> str:
    """For an ABC, the classes registered with it or with an ABC derived from it (what
    ``isinstance``/``issubclass`` consult besides the bases, and Dynamo answers while it traces
    with no guard): ``Base.register(Impl)`` run in one process only makes another class."""
    if not isinstance(cls, abc.ABCMeta):
        return ""
    found: set[str] = set()
    seen: set[int] = set()
    pending: list[type] = [cls]
    while pending:  # an ABC's subclasses are ABCs: each has a registry of its own
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for ref in abc._get_dump(current)[0]:  # type: ignore[attr-defined]
            held = ref()
            if held is not None:
                found.add(f"{held.__module__}.{held.__qualname__}")
        pending.extend(type.__subclasses__(current))
    return f" registered {digest(';'.join(sorted(found)).encode())[:16]}" if found else ""


def _class_state(cls: type) -> str:
    """What a class holds that Dynamo reads without a guard: its code and its bases' (a method
    bound at import to one of two functions, another class under the same name), for a class
    of the program's own (outside the standard library and torch); and a dataclass's field
    defaults (baked into a trace that builds one; they can differ between processes with one
    source, set from the environment at import or changed by the program)."""
    bodies = [_class_body(c) for c in cls.__mro__ if own_source(getattr(c, "__module__", ""))]
    state = f" body {digest(';'.join(bodies).encode())[:16]}" if bodies else ""
    fields = vars(cls).get("__dataclass_fields__")
    if not isinstance(fields, dict):
        return state
    parts = []
    for name, field in sorted(fields.items()):
        default = getattr(field, "default", None)
        factory = getattr(field, "default_factory", None)
        found = fingerprint(default)
        if found is None:
            found = f"~{type(default).__qualname__}"
        if callable(factory):
            found += f" factory {_factory_state(factory)}"
        parts.append(f"{name}={found}")
    return f"{state} defaults {digest(';'.join(parts).encode())[:16]}"


def _factory_state(factory: Callable[..., Any]) -> str:
    """A dataclass field's default factory as Dynamo inlines it, none of it guarded: its code
    (two lambdas differ by it) and what a function holds, its defaults and closure cells (one
    factory function made for two values)."""
    found = fingerprint(factory)
    if found is None:
        found = f"~{getattr(factory, '__qualname__', type(factory).__qualname__)}"
    if isinstance(factory, types.FunctionType):
        held: list[object] = [factory.__defaults__]
        for cell in factory.__closure__ or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:  # a cell not yet set
                held.append(None)
        parts = [fingerprint(value) or f"~{type(value).__qualname__}" for value in held]
        found += f" holding [{'; '.join(parts)}]"
    return found


# A class's body digest, kept while its namespace holds the same objects.
_BODIES: weakref.WeakKeyDictionary[type, tuple[tuple[int, ...], str]] = weakref.WeakKeyDictionary()


def _class_body(cls: type) -> str:
    """A digest of the code ``cls``'s own namespace holds (:func:`_member`), the same in every
    process with the same class."""
    namespace = dict(vars(cls))
    ids = tuple(id(value) for value in namespace.values())
    with contextlib.suppress(TypeError):
        known = _BODIES.get(cls)
        if known is not None and known[0] == ids:
            return known[1]
    members = ((name, _member(value)) for name, value in sorted(namespace.items()))
    parts = [f"{name}={member}" for name, member in members if member is not None]
    body = f"{cls.__qualname__} {digest(';'.join(parts).encode())[:16]}"
    with contextlib.suppress(TypeError):
        _BODIES[cls] = (ids, body)
    return body


def _member(value: object) -> str | None:
    """A class member's code: a function by its code and defaults (``None`` for a member that
    is not code: data a class holds is read through guards on its values, and can change while
    the program runs, as a cache kept on the class does)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return "property " + ",".join(str(_member(f)) for f in (value.fget, value.fset, value.fdel))
    if isinstance(value, types.FunctionType):
        defaults = fingerprint(value.__defaults__)
        return f"function {code_digest(value.__code__)} {defaults}"
    return None


def defining_module(value: object) -> str | None:
    """The module whose source defines ``value`` (a module itself, a class, a function, an enum
    member), or ``None``."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(value, enum.Enum):
        value = type(value)
    name = getattr(value, "__module__", None)
    return name if isinstance(name, str) else None


# Code is immutable and compared by what it does: equal code has one digest (a trace's guards
# name the same functions thousands of times).
@functools.lru_cache(maxsize=8192)
def code_digest(code: types.CodeType) -> str:
    """A digest of what ``code`` does: its bytecode, names and constants, the same in every
    process (a nested function's code by its own digest, not its address; sets sorted)."""
    consts = [
        f"code {code_digest(c)}" if isinstance(c, types.CodeType) else canonical(c)
        for c in code.co_consts
    ]
    body = code.co_code + repr(code.co_names).encode() + canonical(consts).encode()
    return digest(body)[:16]


def resolve(name: str, scope: Mapping[str, Any], cells: dict[str, Any] | None = None) -> object:
    """The object a guard's source names, evaluated as Dynamo's own guard code evaluates it:
    ``G`` is the globals ``scope``, ``L['name']`` or a bare name a cell of the compiled
    function's closure, and only the builtins Dynamo's sources use (``type``, ``dict``, ``list``...) are there. The
    source comes from an entry that passed the store's checks, like the pickle beside it."""
    if not _SOURCE.match(name.replace(", ", ",")):
        raise Unverifiable(f"not a source expression: {name!r}")
    names = {"G": scope, "L": cells or {}, **(cells or {})}
    try:
        return eval(name, {"__builtins__": _SOURCE_BUILTINS}, names)
    except Exception as exc:
        raise Unverifiable(f"{name}: {type(exc).__name__}: {exc}") from exc


class DroppedGuards:
    """The guards Dynamo dropped from a loaded package, put back: one lambda guard in the guard
    manager of each frame the package installs (:meth:`for_frame`), true while every object its
    guards name (from the frame's globals, closure cells or arguments: ``self``'s class) is, by
    name, the one recorded where the frame was traced. A global rebound later in the run makes
    Dynamo compile again, as in plain torch."""

    def __init__(
        self,
        frames: dict[str, tuple[Mapping[str, Any], dict[str, str]]],
        matched: dict[tuple[str, str], object],
    ) -> None:
        self.frames = {
            frame: FrameGuards(scope, guards, [matched.get((frame, n), _NOTHING) for n in guards])
            for frame, (scope, guards) in frames.items()
        }

    def for_frame(self, code: types.CodeType) -> tuple[Callable[[Any], bool], list[str]] | None:
        """The lambda guard (and its description) for the guard manager of ``code``'s frame."""
        found = self.frames.get(frame_key(code))
        return (found, found.parts) if found is not None else None


class FrameGuards:
    """One frame's dropped guards, called with the frame's locals on each call. Each source is
    compared by identity with the object that last matched it by name (one expression for all:
    a few microseconds), and by name where that fails."""

    def __init__(self, scope: Mapping[str, Any], guards: dict[str, str], memo: list[object]):
        self.scope = scope
        self.checks = [(_compiled(name), named) for name, named in guards.items()]
        self.memo = memo
        same = " and ".join(f"({name}) is __memo[{i}]" for i, name in enumerate(guards))
        self.same = compile(same or "True", "<dropped guards>", "eval")
        self.parts = [f"{name} is {named} (compilecache)" for name, named in guards.items()]

    def __call__(self, frame_locals: Any) -> bool:
        try:
            names = {**frame_locals, "G": self.scope, "L": frame_locals, "__memo": self.memo}
            if eval(self.same, _EVAL_GLOBALS, names):
                return True
            for index, (code, named) in enumerate(self.checks):
                value = eval(code, _EVAL_GLOBALS, names)
                if value is not self.memo[index]:
                    if identity(value) != named:
                        return False
                    self.memo[index] = value
            return True
        except Exception:  # an emptied cell, a deleted global, an unnamed object: compile again
            return False


_NOTHING = object()


# The guards a package's frames dropped: a frame's key (frame_key) -> source -> identity().
Dropped = dict[str, dict[str, str]]


_EVAL_GLOBALS = {"__builtins__": _SOURCE_BUILTINS}


def _compiled(name: str) -> types.CodeType:
    if not _SOURCE.match(name.replace(", ", ",")):
        raise Unverifiable(f"not a source expression: {name!r}")
    return compile(name, "<dropped guard>", "eval")


class LiveCheck:
    """A check of one source's value on each call, read from the frame's locals and its
    module's live globals: for a value whose own guard manager takes no lambda guard (a
    dict's). False where the source cannot be read (Dynamo compiles again)."""

    def __init__(self, name: str, scope: Mapping[str, Any], test: Callable[[Any], bool]):
        self.code = _compiled(name)
        self.scope = scope
        self.test = test

    def __call__(self, frame_locals: Any) -> bool:
        try:
            # The names FrameGuards reads sources with (a dict literal: this runs on every call).
            names = {**frame_locals, "G": self.scope, "L": frame_locals}
            return bool(self.test(eval(self.code, _EVAL_GLOBALS, names)))
        except Exception:
            return False


def frame_key(code: Any) -> str:
    """A frame's code by what survives torch's serialisation and another machine's paths."""
    return f"{code.co_qualname}:{code.co_firstlineno}"


def closure_cells(fn: Any) -> dict[str, Any]:
    """``fn``'s closure: cell name -> contents (an empty cell is left out)."""
    found: dict[str, Any] = {}
    names = getattr(fn.__code__, "co_freevars", ())
    for name, cell in zip(names, getattr(fn, "__closure__", None) or (), strict=False):
        with contextlib.suppress(ValueError):
            found[name] = cell.cell_contents
    return found


def scope_of(name: str, frame: types.CodeType | None) -> str | None:
    """The key of the frame whose guard ``name`` is (its guards are checked with that frame's
    globals and values), or ``None`` for a source that cannot be evaluated again: one that is
    not rooted at a global, an argument, a local or a cell of its frame."""
    if frame is None or not _SOURCE.match(name.replace(", ", ",")):
        return None
    source = CALLS_AROUND.sub("", name)
    if GLOBAL_ROOT.match(source):
        return frame_key(frame)
    root = LOCAL_ROOT.match(source) or NAME_ROOT.match(source)
    if root is None:
        return None
    if root.group(1) in (*frame.co_varnames, *frame.co_cellvars, *frame.co_freevars):
        return frame_key(frame)
    return None


def merge_values(known: Values, new: Values) -> None:
    """Add ``new``'s value sets to ``known``'s, each once."""
    for frame, sets in new.items():
        kept = known.setdefault(frame, [])
        kept.extend(values for values in sets if values not in kept)


# How the keys of a dict a frame's guards check are named among its recorded values.
KEYS = "KEYS"


def mixed_orders(values: Values) -> str:
    """Which frame of a package has two builds that recorded another order for one set, or
    other keys for one dict (``""`` where none has): the check of each build accepts what any
    build recorded, so one entry cannot say which order goes with which trace (a process that
    traced again after a loaded trace's order failed adds its own)."""
    for frame, builds in values.items():
        seen: dict[str, str] = {}
        for recorded in builds:
            for name, value in recorded.items():
                if not (name.endswith(f" {KEYS}") or "set [" in value):
                    continue
                if seen.setdefault(name, value) != value:
                    return f"{frame}: {name} was recorded in two orders"
    return ""


def values_match(recorded: Mapping[str, str], built: Mapping[str, str | None]) -> str:
    """Which value of ``recorded`` (one build where a frame was traced) ``built`` (a build of
    its guards at load) differs from (``""`` where none does). A value the load's build did not
    read is not compared; nor a tensor argument the load sees as a fake tensor with symbolic
    sizes (its guards check the tensor on every call). A value the load's build read that this
    build did not is a difference: the load's is another build's (a frame compiled twice, once
    where an environment variable was unset and once where it was set)."""
    for name, now in built.items():
        if name not in recorded and now is not None:
            return f"{name} (not read, now {now[:60]})"
    for name, then in recorded.items():
        if name not in built:
            continue
        now = built[name]
        if now == then or (now is None and then.startswith("tensor ")):
            continue
        return f"{name} ({then[:60]}, now {str(now)[:60]})"
    return ""


def merge_dropped(known: Dropped, new: Dropped) -> str:
    """Add ``new`` to ``known``; a guard seen for two objects (a global rebound between two
    compiles of one package) is said instead, and nothing is added."""
    for scope, named in new.items():
        for name, value in named.items():
            before = known.get(scope, {}).get(name, value)
            if before != value:
                return f"{name} was two objects ({before}, then {value})"
    for scope, named in new.items():
        known.setdefault(scope, {}).update(named)
    return ""


def global_roots(guards: Iterable[str]) -> Iterable[str]:
    for name in guards:
        root = GLOBAL_ROOT.match(name)
        if root is not None:
            yield root.group(1)


# What a frame's guards were built from, per frame: one set per build of its guards (a frame
# compiled for two shapes has two), each a fingerprint of every value read, by source name.
Values = dict[str, list[dict[str, str]]]
# The key under which a frame's own code is fingerprinted beside its guards' values.
CODE = "<code>"
# torch's value types, by what they print (a dtype, a device, ...).
_TORCH_VALUES = frozenset({"dtype", "device", "layout", "memory_format", "qscheme"})


def fingerprint(value: object) -> str | None:
    """What a value a guard was built from is, comparable across processes: constants by type
    and value (floats by their bits: a NaN's sign, -0.0), sequences of them, tensors by their
    metadata, and what :func:`identity` names; ``None`` for anything else (not compared)."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, float):
        return f"float {value!r} {struct.pack('<d', value).hex()}"
    if isinstance(value, complex):
        return f"complex {value!r} {struct.pack('<dd', value.real, value.imag).hex()}"
    if isinstance(value, enum.Enum):
        return identity(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        # A set in its iteration order, which a trace that loops over it unrolls (the order of
        # strings follows the process's hash seed).
        found = [fingerprint(v) for v in value]
        parts = [p for p in found if p is not None]
        if len(parts) < len(found):
            return None
        return f"{type(value).__name__} [{', '.join(parts)}]"
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ in _TORCH_VALUES:
        return f"torch.{kind.__name__} {value}"
    if any(c.__name__ == "TensorBase" for c in type(value).__mro__):
        # A tensor, a parameter, or the fake tensor torch saves in its place: by its metadata,
        # where its sizes are numbers (a dynamic size is a symbol: not compared).
        shape = tuple(getattr(value, "shape", ()))
        if not all(type(size) is int for size in shape):
            return None
        return f"tensor {getattr(value, 'dtype', '')} {shape}"
    try:
        return identity(value)
    except Unverifiable:
        return None


# Guard kinds whose check is not compared between the trace and a load: one that names a
# per-process counter (a dict's version), or an object alive in this process, and the tensor
# guards (built at load from the saved fake tensors, and checked on every call).
PER_PROCESS_GUARDS = frozenset({"DICT_VERSION", "WEAKREF_ALIVE", "TENSOR_MATCH"})
# An object's or a type's id in a check (``___check_obj_id(G['os'], 1401...)``): another in
# every process.
_ID_IN_CHECK = re.compile(r"\b[0-9]{9,}\b")


def guard_code_text(code_list: Iterable[str]) -> str:
    """A guard's check as Dynamo wrote it, the same in every process that would build the same
    check: ids masked."""
    return "check " + " and ".join(_ID_IN_CHECK.sub("#", str(part)) for part in code_list)


def canonical(value: object) -> str:
    """A repr that is the same in every process: sets and dicts in sorted order (a set's own
    order follows the per-process string hash seed)."""
    if isinstance(value, dict):
        items = sorted((canonical(k), canonical(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(canonical(v) for v in value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(canonical(v) for v in value) + "]"
    return repr(value)
