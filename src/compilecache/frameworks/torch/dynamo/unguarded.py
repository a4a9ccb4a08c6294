"""What Dynamo reads while it traces and leaves unguarded, guarded under compilecache's mode.

A stored trace is served wherever its guards hold, so a value the trace depends on must have a
guard. Dynamo installs none for some reads: a key a dict lacks (``os.environ.get(name)`` for an
unset variable), what a standard library function reads from its module's globals
(``os.getenv``), an attribute a module lacks (``getattr(settings, "OPT", default)``), an
object's ``__dict__``, ``hash()``'s per-process answer, a value a program put into
``builtins``, the order of a set (which follows the per-process string hash seed and the
objects' addresses), and the answers of functions of the process's state that Dynamo folds
into constants (``torch.distributed.get_rank()``, ``sys.getrecursionlimit()``), ``id()``, an ABC's
registrations (``isinstance``), a function's ``__annotations__`` and an ``inspect.Signature``
from outside the frame.
:class:`UnguardedReads` hooks the Dynamo code that makes those reads: under compilecache's mode
(never the program's own) each installs the guard torch installs for the nearest guarded read,
or, where none can say it (``hash()``, a builtins value, a set's order, a folded answer), keeps
the frame's package from being stored. A package is stored only where every one of these hooks
is in place (``DynamoPackages`` checks :attr:`UnguardedReads.hooks`).
"""

from __future__ import annotations

import abc
import functools
import importlib
import os
import sys
import sysconfig
import typing
from collections.abc import Callable
from typing import Any

from compilecache.frameworks.hashorder import hashes_alike
from compilecache.frameworks.torch.dynamo.guard_hooks import GuardHooks
from compilecache.frameworks.torch.dynamo.guards import own_source
from compilecache.frameworks.torch.dynamo.mode import (
    BUILTIN,
    DICTS,
    MISC,
    POLYFILLS,
    SETS,
    SYMBOLIC,
    TORCH_FUNCTIONS,
)

# Python's own builtins that are not code, the same object in every process.
_CONSTANT_BUILTINS: dict[str, object] = {"Ellipsis": Ellipsis, "NotImplemented": NotImplemented}
_ABSENT = object()


class UnguardedReads:
    """The hooks of Dynamo's unguarded reads for one torch integration's Dynamo packages; what
    they cannot guard goes to the guard hooks' verdicts (``unsure``, ``refuse``)."""

    def __init__(self, guards: GuardHooks) -> None:
        self.guards = guards
        self.patches = guards.patches
        self.local = guards.local
        # Each hook by the module it goes into, applied as that module finishes importing.
        self.hooks: dict[str, Callable[[Any], None]] = {
            DICTS: self.apply_dicts,
            SYMBOLIC: self.apply_inlining,
            MISC: self.apply_modules,
            BUILTIN: self.apply_builtins,
            SETS: self.apply_sets,
            TORCH_FUNCTIONS: self.apply_torch_functions,
            POLYFILLS: self.apply_polyfills,
        }

    def apply_dicts(self, module: Any) -> None:
        """Hook ``torch._dynamo.variables.dicts`` (now imported). Raises what fails."""
        self.patches.wrap(
            module.ConstDictVariable,
            "getitem_const_raise_exception_if_absent",
            self._subscripting,
            label="dynamo.absent_keys",
        )
        # An object's __dict__ read as a dict: torch guards neither its keys nor what it
        # contains (it follows the trace's own mutations only).
        dunder = module.DunderDictVariable
        for name in ("install_dict_keys_match_guard", "install_dict_contains_guard"):
            self.patches.wrap(
                dunder, name, self._guarding_dunder_dict(module), label=f"dynamo.{name}"
            )

    def apply_inlining(self, module: Any) -> None:
        """Hook ``torch._dynamo.symbolic_convert`` (now imported). Raises what fails."""
        self.patches.wrap(
            module.InliningInstructionTranslator,
            "get_globals_source_and_value",
            self._stdlib_globals,
            label="dynamo.stdlib_environ",
        )
        self.patches.wrap(
            module.InstructionTranslatorBase,
            "load_builtin_from_argval",
            self._builtins,
            label="dynamo.builtin_values",
        )

    def apply_modules(self, module: Any) -> None:
        """Hook ``torch._dynamo.variables.misc`` (now imported). Raises what fails."""
        variable = module.PythonModuleVariable
        # torch 2.13's attribute read; 2.15's (whose hasattr() goes through it).
        read = "var_getattr" if "var_getattr" in vars(variable) else "tp_getattro_impl"
        self.patches.wrap(variable, read, self._module_reading, label="dynamo.module_attr")
        if "call_obj_hasattr" in vars(variable):
            self.patches.wrap(
                variable, "call_obj_hasattr", self._module_asking, label="dynamo.module_hasattr"
            )

    def apply_builtins(self, module: Any) -> None:
        """Hook ``torch._dynamo.variables.builtin`` (now imported, and with it the variables'
        base and constant modules). Raises what fails."""
        builtin = module.BuiltinVariable
        self.patches.wrap(builtin, "call_hash", self._hashing, label="dynamo.hash")
        # "abc".__hash__(), t.__hash__(), tuple.__hash__(t): a constant's own method, and the
        # one every other variable's __hash__ goes through.
        constant = importlib.import_module("torch._dynamo.variables.constant")
        base = importlib.import_module("torch._dynamo.variables.base")
        for owner in (constant.ConstantVariable, base.VariableTracker):
            self.patches.wrap(
                owner, "call_method", self._hashing_method, label="dynamo.hash_method"
            )
        self.patches.wrap(builtin, "call_id", self._identifying, label="dynamo.id")
        for name in ("call_isinstance", "call_issubclass"):
            self.patches.wrap(
                builtin,
                name,
                functools.partial(self._subclassing, instance=name == "call_isinstance"),
                label=f"dynamo.{name}",
            )
        user_defined = importlib.import_module("torch._dynamo.variables.user_defined")
        inspected = user_defined.InspectVariable
        self.patches.wrap(inspected, "__init__", self._inspecting, label="dynamo.inspect")

    def apply_sets(self, module: Any) -> None:
        """Hook ``torch._dynamo.variables.sets`` (now imported). Raises what fails."""
        # torch 2.15 has a base class; 2.13's subclasses take these from SetVariable.
        base = getattr(module, "BaseSetVariable", None) or module.SetVariable
        ordered = (module.OrderedSetVariable, module.DictKeySetVariable)
        for name in ("unpack_var_sequence", "tp_iter_impl", "repr_impl"):
            if name in vars(base):
                make = functools.partial(self._ordering, ordered=ordered, method=name)
                self.patches.wrap(base, name, make, label=f"dynamo.set_{name}")
        make = functools.partial(self._ordering, ordered=ordered, method="pop")
        self.patches.wrap(module.SetVariable, "call_method", make, label="dynamo.set_pop")

    def apply_torch_functions(self, module: Any) -> None:
        """Hook ``torch._dynamo.variables.torch`` (now imported). Raises what fails."""
        self.patches.wrap(
            module.TorchInGraphFunctionVariable,
            "call_function",
            functools.partial(self._folding, held=lambda variable: variable.value),
            label="dynamo.torch_state",
        )

    def apply_polyfills(self, module: Any) -> None:
        """Hook ``torch._dynamo.variables.functions`` (now imported). Raises what fails."""
        if hasattr(module, "fn_var_getattr"):  # torch 2.13's; 2.15 guards annotations
            self.patches.wrap(
                module, "fn_var_getattr", self._annotations, label="dynamo.annotations"
            )
        self.patches.wrap(
            module.PolyfilledFunctionVariable,
            "call_function",
            functools.partial(self._folding, held=lambda variable: variable.fn),
            label="dynamo.polyfill_state",
        )

    def _folding(
        self, original: Callable[..., Any], *, held: Callable[[Any], Any]
    ) -> Callable[..., Any]:
        """Dynamo replaces a call of some functions by their answer while it traces, with no
        guard: the process group's rank, size and whether there is one, the autocast dtype,
        the interpreter's recursion and digit limits. Another process (another rank, another
        setting) would be served the answer of the one that traced; a frame that calls one is
        not stored."""

        def call_function(variable: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
            if self.guards.tracing:
                try:
                    called = held(variable)
                    state = called in _process_state()
                except Exception:  # unhashable: not one of them
                    state = False
                if state:
                    self.guards.refuse(
                        f"it reads {getattr(called, '__qualname__', called)}() of this process, "
                        "which Dynamo answers with no guard"
                    )
            return original(variable, tx, *args, **kwargs)

        return call_function

    def _ordering(
        self, original: Callable[..., Any], *, ordered: tuple[type, ...], method: str
    ) -> Callable[..., Any]:
        """A set iterated, popped or printed while traced: Dynamo bakes in the order of its
        items, which for a set Python made (a literal of strings, ``for n in {"a", "b"}``, is a
        constant ``frozenset``) is this process's: strings follow the per-process hash seed,
        other objects their addresses. Such a frame is not stored, unless every item hashes the
        same in every process (numbers, ``None``; strings where ``PYTHONHASHSEED=0``) and the
        set was made in the frame: one from outside it (a global, an attribute, an argument)
        iterates in the order its process's insertions left (``{0, 8}`` built by adding 8 then
        0 is another order), and torch guards it by equality (``{1} == {True}``). Sets whose
        order is their insertion's (torch's ``OrderedSet``, a dict's keys) are left alone."""

        def ordering(variable: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
            if (
                self.guards.tracing
                and (method != "pop" or (args and args[0] == "pop"))
                and not isinstance(variable, ordered)
                and (variable.source is not None or not _order_free(variable))
            ):
                self.guards.refuse(
                    "it depends on the order of a set, which follows Python's per-process "
                    "hashing (PYTHONHASHSEED=0 fixes it for strings) or, for a set from "
                    "outside the frame, how the process built it"
                )
            return original(variable, tx, *args, **kwargs)

        return ordering

    def _subscripting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Dynamo traces ``d[key]`` for a key ``d`` lacks (the ``KeyError`` caught, as in
        ``os.environ.get(name)`` and ``name in os.environ``) without a guard that the key is
        still absent: the trace would be served where the key is there (an environment
        variable set on another machine, an entry a module adds from the environment at
        import). Under compilecache's mode the guard torch's own ``d.get(key)`` installs is
        installed here too, so it is saved with the package and checked at load and on every
        call."""

        def getitem_const_raise_exception_if_absent(variable: Any, tx: Any, arg: Any) -> Any:
            if self.guards.enabled and variable.source is not None and arg not in variable:
                try:
                    variable.install_dict_contains_guard(tx, [arg])
                except Exception as exc:
                    self.guards.unsure(f"a missing key could not be guarded ({exc})")
            return original(variable, tx, arg)

        return getitem_const_raise_exception_if_absent

    def _module_reading(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Dynamo traces ``module.NAME`` for a name the module lacks (the ``AttributeError``
        caught, ``getattr(module, NAME, default)``) without a guard: a module that defines it
        only when the environment says so would be served the trace made without it. Under
        compilecache's mode the attribute's absence is guarded (torch's ``HASATTR``)."""

        def getattr_traced(variable: Any, tx: Any, name: str) -> Any:
            if self.guards.enabled and variable.source is not None:
                try:
                    if not hasattr(variable.value, name):
                        self._guard_hasattr(variable, name)
                except Exception as exc:
                    self.guards.unsure(f"a module's missing attribute could not be guarded ({exc})")
            return original(variable, tx, name)

        return getattr_traced

    def _module_asking(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``hasattr(module, NAME)``, which Dynamo answers without a guard: guarded as
        :meth:`_module_reading` guards a missing attribute."""

        def call_obj_hasattr(variable: Any, tx: Any, name: str) -> Any:
            if self.guards.enabled and variable.source is not None:
                try:
                    self._guard_hasattr(variable, name)
                except Exception as exc:
                    self.guards.unsure(f"a module's attribute could not be guarded ({exc})")
            return original(variable, tx, name)

        return call_obj_hasattr

    @staticmethod
    def _guard_hasattr(variable: Any, name: str) -> None:
        guards = importlib.import_module("torch._dynamo.guards")
        check = functools.partial(guards.GuardBuilder.HASATTR, attr=name)
        guards.install_guard(variable.make_guard(check))

    def _hashing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``hash(...)`` traced: Dynamo bakes the number in, and a string's hash follows the
        process's hash seed (random unless ``PYTHONHASHSEED`` says otherwise). Such a frame is
        not stored."""

        def call_hash(variable: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
            if self.guards.tracing:
                self.guards.refuse("it calls hash() while traced")
            return original(variable, tx, *args, **kwargs)

        return call_hash

    def _hashing_method(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``x.__hash__()`` traced, as :meth:`_hashing`: such a frame is not stored."""

        def call_method(variable: Any, tx: Any, name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "__hash__" and self.guards.tracing:
                self.guards.refuse("it calls __hash__() while traced")
            return original(variable, tx, name, *args, **kwargs)

        return call_method

    def _identifying(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``id(obj)`` traced: Dynamo bakes the address in (guarded by identity, which another
        process checks by what the object is, not where it lives). Such a frame is not
        stored."""

        def call_id(variable: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
            if self.guards.tracing:
                self.guards.refuse("it calls id() while traced")
            return original(variable, tx, *args, **kwargs)

        return call_id

    def _subclassing(self, original: Callable[..., Any], *, instance: bool) -> Callable[..., Any]:
        """``isinstance``/``issubclass`` traced: Dynamo answers them while it traces, with no
        guard on what an ABC's answer rests on besides the classes' bases: its registry
        (``Base.register(Impl)`` run in one process only), which the guard on the class checks
        under compilecache (``guards.identity``), and its ``__subclasshook__`` or another
        metaclass's own check, which can read anything. A frame whose answer runs such a check
        of the program's own is not stored."""

        def call(variable: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
            if self.guards.tracing and len(args) == 2:
                try:
                    derived = _derived_class(args[0], instance)
                    classes = _checked_classes(args[1].as_python_constant())
                    unsettled = [
                        cls
                        for cls in classes
                        if derived is None or not _decided_by_bases(derived, cls)
                    ]
                except Exception:  # not a constant: Dynamo does not fold it either
                    unsettled = []
                if unsettled:
                    which = "isinstance" if instance else "issubclass"
                    self.guards.refuse(
                        f"it calls {which}() of {getattr(derived, '__qualname__', derived)} "
                        f"and {getattr(unsettled[0], '__qualname__', unsettled[0])}, whose "
                        "answer another process's registrations or hooks can change"
                    )
            return original(variable, tx, *args, **kwargs)

        return call

    def _inspecting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """An ``inspect.Signature`` or ``inspect.Parameter`` from outside the frame (a global
        made at import): Dynamo reads it with no guard (its source is marked to skip them),
        and a default set from the environment is baked in. Such a frame is not stored."""

        def __init__(variable: Any, *args: Any, **kwargs: Any) -> None:
            original(variable, *args, **kwargs)
            unguarded = type(kwargs.get("source")).__name__ == "SkipGuardSource"
            if unguarded and self.guards.tracing:
                self.guards.refuse("it reads an inspect.Signature or Parameter, unguarded")

        return __init__

    def _annotations(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A function's ``__annotations__``: Dynamo reads them with no guard ("changing
        annotations is rare"); one made from the environment is baked in. A frame that reads
        those of a function outside the standard library and torch is not stored."""

        def fn_var_getattr(tx: Any, fn: object, source: Any, name: str) -> Any:
            if (
                name == "__annotations__"
                and source is not None
                and self.guards.tracing
                and own_source(getattr(fn, "__module__", None) or "")
            ):
                self.guards.refuse("it reads a function's __annotations__, unguarded")
            return original(tx, fn, source, name)

        return fn_var_getattr

    def _builtins(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A name found in builtins that is not code (``builtins.SCALE = 2.0``, set by a program
        from its environment): Dynamo bakes its value in with no guard. Such a frame is not
        stored (Python's own non-callable builtins, ``Ellipsis`` and ``NotImplemented``, are
        the same in every process)."""

        def load_builtin_from_argval(tx: Any, argval: Any) -> Any:
            if self.guards.tracing:
                value = tx.f_builtins.get(argval, _ABSENT)
                if not callable(value) and _CONSTANT_BUILTINS.get(argval, _ABSENT) is not value:
                    self.guards.refuse(f"it reads {argval!r} from builtins, which has no guard")
            return original(tx, argval)

        return load_builtin_from_argval

    def _stdlib_globals(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Dynamo guards nothing a standard library function reads from its module's globals
        (``SkipGuardSource``: "users don't mutate the stdlib"), so ``os.getenv(name)`` or
        ``os.path.expandvars`` read the environment unguarded. Under compilecache's mode the
        environment (``os``, ``os.environ``, ``os.environb`` read by such a function) keeps its
        guards, as where the program reads it itself."""
        environment = (os, os.environ, getattr(os, "environb", None))

        def get_globals_source_and_value(tx: Any, name: str) -> Any:
            value, variable, source = original(tx, name)
            if self.guards.enabled and type(source).__name__ == "SkipGuardSource":
                try:
                    held = value.get(name) if isinstance(value, dict) else getattr(value, name)
                    if any(held is read for read in environment) or not _in_stdlib(tx):
                        source = source.base
                except Exception as exc:
                    self.guards.unsure(f"a standard library global could not be read ({exc})")
            return value, variable, source

        return get_globals_source_and_value

    def _guarding_dunder_dict(self, dicts: Any) -> Callable[..., Callable[..., Any]]:
        """``"k" in obj.__dict__``, ``obj.__dict__.get(k)``, its keys: torch installs no guard
        (an object whose attribute is set only where the environment says so would be served
        the trace made without it). Under compilecache's mode the guard a plain dict gets is
        installed."""

        def wrapping(original: Callable[..., Any]) -> Callable[..., Any]:
            plain = getattr(dicts.ConstDictVariable, original.__name__)

            def install(variable: Any, *args: Any) -> Any:
                if self.guards.enabled and variable.source is not None:
                    try:
                        return plain(variable, *args)
                    except Exception as exc:
                        self.guards.unsure(f"an object's __dict__ could not be guarded ({exc})")
                return original(variable, *args)

            return install

        return wrapping


_STDLIB_DIRS = tuple(
    os.path.realpath(sysconfig.get_paths()[kind]) + os.sep for kind in ("stdlib", "platstdlib")
)


def _in_stdlib(tx: Any) -> bool:
    """Whether the function being inlined is the standard library's: Dynamo goes by its
    module's name, which a program's own module can share (a ``sched.py`` or ``test.py`` of
    its own); one whose file is elsewhere keeps its guards."""
    return _stdlib_file(tx.f_code.co_filename)


@functools.lru_cache(maxsize=1024)
def _stdlib_file(name: str) -> bool:
    if name.startswith("<frozen "):  # the interpreter's own (os, posixpath, _collections_abc)
        return True
    return bool(name) and os.path.realpath(name).startswith(_STDLIB_DIRS)


def _derived_class(variable: Any, instance: bool) -> type | None:
    """The class ``isinstance``'s object has, or ``issubclass``'s first argument."""
    value = variable.python_type() if instance else variable.as_python_constant()
    return value if isinstance(value, type) else None


def _checked_classes(value: Any) -> tuple[Any, ...]:
    """The classes ``isinstance``/``issubclass`` checks against: one, a tuple or a union."""
    if isinstance(value, tuple):
        return tuple(c for v in value for c in _checked_classes(v))
    args = typing.get_args(value)
    return _checked_classes(args) if args else (value,)


def _decided_by_bases(derived: type, cls: Any) -> bool:
    """Whether ``issubclass(derived, cls)`` follows from what the classes' guards check (the
    same in every process where they hold): a plain class's check reads the bases; an ABC's
    reads its registrations too (which the guard on the class checks) and its
    ``__subclasshook__``, which, where it is the program's, can read anything; so can another
    metaclass's own check of the program's."""
    meta = type(cls)
    if meta is type:
        return True
    if isinstance(cls, abc.ABCMeta):
        # Its registrations are part of what a guard on the class checks (guards.identity);
        # the standard library's hooks (collections.abc's) read the class's methods only, and
        # the program's own code is compared, not what its hook reads.
        return not any(
            "__subclasshook__" in vars(c) and own_source(c.__module__) for c in cls.__mro__
        )
    own = own_source(getattr(meta, "__module__", "") or "")
    return not own or (
        meta.__instancecheck__ is type.__instancecheck__  # type: ignore[comparison-overlap]
        and meta.__subclasscheck__ is type.__subclasscheck__  # type: ignore[comparison-overlap]
    )


def _order_free(variable: Any) -> bool:
    """Whether each item of a traced set is a constant that hashes the same in every process
    (its place in the set's order then does not follow the process); unsure is ``False``."""
    try:
        for item in variable.items:
            held = getattr(item, "vt", item)
            if not held.is_python_constant() or not hashes_alike(held.as_python_constant()):
                return False
    except Exception:
        return False
    return True


@functools.cache
def _process_state() -> frozenset[Any]:
    """The functions Dynamo answers while tracing (it folds them into constants) whose answer
    is this process's state rather than a function of their arguments or of what the
    package's key and guards hold."""
    torch = importlib.import_module("torch")
    found: list[Any] = [
        torch.get_autocast_dtype,
        getattr(torch, "get_autocast_gpu_dtype", None),
        getattr(torch._C, "_get_privateuse1_backend_name", None),
        sys.getrecursionlimit,
        getattr(sys, "get_int_max_str_digits", None),
    ]
    distributed = torch.distributed
    if distributed.is_available():
        found += [distributed.is_initialized, distributed.get_rank, distributed.get_world_size]
    return frozenset(f for f in found if f is not None)
