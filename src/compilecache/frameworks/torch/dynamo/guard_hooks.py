"""The guards Dynamo drops under ``caching_precompile``: seen where Dynamo drops them, put back
in memory, and saved so that another process can check them.

Hooks of ``torch._dynamo.guards`` (and ``torch._guards.Guard``) for
:class:`~compilecache.frameworks.torch.dynamo.packages.DynamoPackages`: each acts only while
the mode is compilecache's (``enabled``); a program's own mode is torch's, untouched. What a
compile dropped is kept per thread (``local.dropped``, ``local.frames``, ``local.problem``) until
its package is recorded; a loaded package's check (``local.restoring``) goes into the guard
managers its install builds.

The values a frame's guards are built from are fingerprinted too (``local.values``), with the
frame's code: torch saves a package's guards with the objects they read, but a module, a class
or a function is saved by name, so a guard reaching a value through one (``settings.SCALE``, a
class attribute, a dataclass default) is built again at load from today's value and always
holds. A load compares each value its install's guards are built from with the one recorded
where the frame was traced (``local.expected``); one that differs makes the package stale
(``local.stale``), and Dynamo traces.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from compilecache.frameworks.torch.dynamo.guards import (
    CODE,
    DERIVED,
    DROPPED,
    KEYS,
    PER_PROCESS_GUARDS,
    LiveCheck,
    Unverifiable,
    code_digest,
    defining_module,
    fingerprint,
    frame_key,
    guard_code_text,
    identity,
    merge_values,
    values_match,
)
from compilecache.frameworks.torch.dynamo.repairs import (
    forget_incomparable_export_ref,
    saved_as_missing,
    unwrapped,
    wrapped_path,
)
from compilecache.patches import Patches
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

# Set on a CheckFunctionManager while it builds its guards (see GuardHooks._restore).
_FULL = "_compilecache_full_build"
_USER_KEPT = "_compilecache_user_kept"
# What Dynamo logs for each guard caching_precompile drops (torch/_dynamo/guards.py).
_DROPPED_GUARD_WARNING = "guard on %s is dropped with caching_precompile=True"
# What torch warns of as it saves a guard on a tensor that is not a leaf (it reads its .grad),
# which only the mode's saving of guards does (transformers' GPT-2).
_NON_LEAF_GRAD_WARNING = "The .grad attribute of a Tensor that is not a leaf Tensor"
# The guards Dynamo puts on a whole mapping it iterates (its length, its keys), and the
# environment's dicts by the end of their source names.
_WHOLE = ("SEQUENCE_LENGTH", "DICT_KEYS_MATCH")
_ENVIRONMENT_DICTS = (".environ._data", ".environb._data")


def _strict_precompile() -> bool:
    config = importlib.import_module("torch._dynamo.config")
    return bool(getattr(config, "strict_precompile", False))


# The guards that check a constant with ==.
_EQUALITY_GUARDS = frozenset({"EQUALS_MATCH", "CONSTANT_MATCH"})


def _itself(value: Any) -> Any:
    return value


def _dict_keys(value: Any) -> tuple[Any, ...]:
    return tuple(dict.keys(value))


def _holds_float_zero(value: object) -> bool:
    """Whether ``value`` is a float zero, or a sequence or set holding one (at any depth)."""
    if isinstance(value, float):
        return value == 0.0
    if isinstance(value, complex):
        return value.real == 0.0 or value.imag == 0.0
    if isinstance(value, (tuple, list, set, frozenset)):
        return any(_holds_float_zero(v) for v in value)
    return False


def _holds_ordered_set(value: object) -> bool:
    """Whether ``value`` is a set of two or more items (which have an order), or a sequence or
    set holding one (at any depth)."""
    if isinstance(value, (set, frozenset)):
        return len(value) > 1 or any(_holds_ordered_set(v) for v in value)
    if isinstance(value, (tuple, list)):
        return any(_holds_ordered_set(v) for v in value)
    return False


class _QuietDroppedGuards(logging.Filter):
    """Keeps Dynamo's warnings about guards that package mode drops out of the program's
    output while the mode is compilecache's (the program did not ask for it, and the guards are
    put back in memory); compilecache's debug log keeps them."""

    def __init__(self, packages: GuardHooks) -> None:
        super().__init__()
        self.packages = packages

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.packages.enabled or _DROPPED_GUARD_WARNING not in str(record.msg):
            return True
        with contextlib.suppress(Exception):
            log.debug("compilecache: torch: %s (put back in memory)", record.getMessage())
        return False


class _QuietGuardErrors(logging.Filter):
    """Keeps torch's error log of a guard that fails to build out of the program's output while
    compilecache builds a package's guards to check it (before storing it, or to install one it
    read): the package is then not stored, or not used, and Dynamo traces; compilecache's debug
    log keeps the lines."""

    def __init__(self, local: threading.local) -> None:
        super().__init__()
        self.local = local

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(self.local, "quiet", False):
            return True
        with contextlib.suppress(Exception):
            log.debug("compilecache: torch: %s", record.getMessage())
        return False


class GuardHooks:
    """The hooks of Dynamo's guards for one torch integration's Dynamo packages."""

    def __init__(
        self, cache: Cache, patches: Patches, local: threading.local, enabled: Callable[[], bool]
    ) -> None:
        self.cache = cache
        self.patches = patches
        # The compiling thread's state, shared with the packages (see the module docstring).
        self.local = local
        self._enabled = enabled

    @property
    def enabled(self) -> bool:
        """Whether caching_precompile is on because of compilecache now."""
        return self._enabled()

    @property
    def tracing(self) -> bool:
        """Whether a frame's guards are being made under compilecache's mode (the mode is ours,
        and no loaded package's guards are being built again)."""
        return self.enabled and getattr(self.local, "expected", None) is None

    def _noting(self) -> bool:
        """:attr:`enabled`, as it was when the guard manager being built began (a build reads
        thousands of values: the mode is asked once per manager, not once per value)."""
        noting: bool | None = getattr(self.local, "noting", None)
        return self.enabled if noting is None else noting

    def apply(self, module: Any) -> None:
        """Hook ``torch._dynamo.guards`` (now imported). Raises what fails."""
        self.patches.wrap(module, "make_guard_filter_entry", self._watching, label="dynamo.guards")
        manager = module.CheckFunctionManager
        self.patches.wrap(
            manager, "serialize_guards", self._serializing, label="dynamo.guards_state"
        )
        self.patches.wrap(manager, "__init__", self._filtering, label="dynamo.guard_filter")
        self.patches.wrap(manager, "build_guards", self._building, label="dynamo.guard_build")
        self.patches.wrap(
            manager, "compile_check_fn", self._checking, label="dynamo.guards_restored"
        )
        self.patches.wrap(
            module.GuardsStatePickler,
            "reducer_override",
            self._pickling,
            label="dynamo.guards_pickle",
        )
        # Dynamo warns of every guard the mode drops: the mode is ours, not the program's,
        # and the dropped guards are put back (their lines go to compilecache's debug log).
        logger = logging.getLogger(module.__name__)
        quiet = [*logger.filters, _QuietDroppedGuards(self)]
        self.patches.replace(logger, "filters", quiet, label="dynamo.guard_warnings")
        guards_log = logging.getLogger("torch._guards")
        quiet_errors = [*guards_log.filters, _QuietGuardErrors(self.local)]
        self.patches.replace(guards_log, "filters", quiet_errors, label="dynamo.guard_errors")
        guard = importlib.import_module("torch._guards").Guard
        self.patches.wrap(guard, "set_export_info", self._exporting, label="dynamo.guard_export")
        self.patches.wrap(module.GuardBuilder, "get", self._reading, label="dynamo.guard_values")

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """While compilecache builds a package's guards itself: torch's log of a guard that
        fails to build goes to compilecache's debug log (see :class:`_QuietGuardErrors`)."""
        before = getattr(self.local, "quiet", False)
        self.local.quiet = True
        try:
            yield
        finally:
            self.local.quiet = before

    # -- the values guards are built from ------------------------------------------------------

    def _reading(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def get(builder: Any, guard_or_source: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                value = original(builder, guard_or_source, *args, **kwargs)
            except Exception as exc:
                if getattr(self.local, "expected", None) is not None and self._noting():
                    # A loaded package's guard reads what this process lacks (an environment
                    # variable, an attribute): its trace is not this process's.
                    why = f"a value its guards read is not here ({type(exc).__name__}: {exc})"
                    self.local.stale = getattr(self.local, "stale", "") or why
                raise
            if self._noting():
                try:
                    self._note_value(builder, guard_or_source, value)
                except Exception as exc:
                    self.unsure(f"a guard's value could not be read ({exc})")
            return value

        return get

    def _guard_lookalikes(self, builder: Any, guards: list[Any]) -> None:
        """What torch's guards let through that a trace can tell apart, checked by its
        fingerprint (types, floats by their bits, a set in its iteration order) on every call.
        (Added to the guards built, not by wrapping torch's: torch saves each guard with its
        builder method.)

        - ``EQUALS_MATCH`` checks a constant with ``==``, which holds for ``0.0`` against
          ``-0.0`` (and a tuple holding either): a trace that divides by it, or copies its
          sign, would be served to the other. A constant holding a float zero is checked (a
          loaded package's against the value saved with it, which the load compares with the
          one recorded where it was traced).
        - It holds for an equal set in another order too; but a trace that iterates the set, or
          makes another from it (``S | {1}``, ``S.copy()``, ``list(S)``), has the order of the
          set where it was traced baked in (ints inserted in another order, strings under
          another hash seed, objects at other addresses). A constant holding a set is checked
          against the fingerprint recorded where the frame was traced, not the set torch saves
          with its guards: that one is rebuilt at load, in the loading process's order.
        - ``DICT_KEYS_MATCH`` finds a dict's keys by lookup, which finds ``True`` or ``1.0``
          under ``1`` (and a ``str`` subclass's key under the plain string); and a dict's keys
          read through ``list(d)`` are guarded by its length alone (``SEQUENCE_LENGTH``): a
          trace that uses a key itself (its value, type or methods) would be served to the
          other. The keys of such a dict are checked where any is not a plain string, or
          where only the length guards them: against the keys recorded where the frame was
          traced (a dict reached through a class or a function is this process's own at
          load, not a saved copy)."""
        loaded = getattr(self.local, "expected", None)
        recorded = None if loaded is None else loaded.get(frame_key(builder.f_code), [])
        checked_keys: set[str] = set()
        matched_keys = {g.name for g in guards if g.create_fn_name() == "DICT_KEYS_MATCH"}
        for guard in guards:
            kind = guard.create_fn_name()
            if kind in _EQUALITY_GUARDS:
                checked: Callable[[Any], Any] = _itself
            elif kind in ("DICT_KEYS_MATCH", "SEQUENCE_LENGTH"):
                if guard.name in checked_keys:
                    continue
                checked = _dict_keys  # matched by lookup, which finds -0.0 under 0.0
            else:
                continue
            held = builder.get(guard)
            if checked is _dict_keys and not isinstance(held, dict):
                continue  # the length of a list or a tuple: its items have their own guards
            value = checked(held)
            zero = _holds_float_zero(value)
            ordered = checked is _itself and _holds_ordered_set(value)
            if checked is _dict_keys and not zero:
                by_length = guard.name not in matched_keys  # only its length is guarded
                if not value or (not by_length and all(type(key) is str for key in value)):
                    continue
            elif not zero and not ordered:
                continue
            found = fingerprint(value)
            if found is None:
                if zero or ordered:
                    what = "a float zero" if zero else "the order of the set"
                    self.unsure(f"{what} in {guard.name} could not be fingerprinted")
                continue  # keys that are objects: matched by identity, not by equality
            expected = {found}
            # Recorded where the frame was traced: a set's order (its fingerprint among the
            # frame's values), a dict's keys (noted here, under their own name).
            noted = f"{guard.name} {KEYS}" if checked is _dict_keys else guard.name
            if checked is _dict_keys:
                checked_keys.add(guard.name)
                if recorded is None:  # traced here: recorded with the frame's values
                    self._building_set(builder.f_code)[noted] = found
            if recorded is not None and (ordered or checked is _dict_keys):
                expected = {values[noted] for values in recorded if noted in values}
                if not expected:
                    self.unsure(f"nothing was recorded for {noted}")
                    continue
            self._check_fingerprint(builder, guard, checked, frozenset(expected))

    def _check_fingerprint(
        self, builder: Any, guard: Any, checked: Callable[[Any], Any], expected: frozenset[str]
    ) -> None:
        """Add a lambda guard: ``checked`` of the guarded value has one of these fingerprints."""

        def same_fingerprint(now: Any) -> bool:
            return fingerprint(checked(now)) in expected

        said = [f"{guard.name}: the same as {min(expected)[:80]} (compilecache)"]
        manager = builder.get_guard_manager(guard)
        if type(manager).__name__ != "DictGuardManager":
            manager.add_lambda_guard(same_fingerprint, said, None)
            return
        # A dict's manager takes no lambda guard: the frame's root reads it on each call.
        live = getattr(builder, "runtime_global_scope", None) or builder.scope["G"]
        try:
            check = LiveCheck(guard.name, live, same_fingerprint)
        except Unverifiable as exc:
            self.unsure(f"{guard.name} could not be checked ({exc})")
            return
        builder.guard_manager.root.add_lambda_guard(check, said, None)

    def unsure(self, why: str) -> None:
        """What a package's guards rest on could not be read: a loaded package is not served
        (Dynamo traces), a traced frame's package is not stored."""
        if getattr(self.local, "expected", None) is not None:
            self.local.stale = why
        self.refuse(why)

    def refuse(self, why: str) -> None:
        """The package of the frame being compiled is not stored (the first reason is kept)."""
        self.local.problem = getattr(self.local, "problem", "") or why

    def _note_value(self, builder: Any, guard_or_source: Any, value: Any) -> None:
        """Fingerprint a value a frame's guards are built from, into the build's set (compared
        or recorded when the build ends: :meth:`_built`)."""
        if value is sys.modules and getattr(self.local, "expected", None) is None:
            # Which modules a process imported differs between processes (an optional
            # dependency); a check of it was served where it no longer held.
            self.refuse("it reads sys.modules while traced")
        source = getattr(guard_or_source, "originating_source", guard_or_source)
        name = str(source.name() if callable(source.name) else source.name)
        named = self._building_set(builder.f_code)
        # One build reads a source again for each guard on it; its value is the same object.
        if name not in named:
            named[name] = fingerprint(value)

    def _note_guard_code(
        self, guard: Any, guard_type: Any, guarded_class: Any, code_list: Any
    ) -> None:
        """Record a guard's check as Dynamo wrote it, into its frame's build set: a check
        built from what the guarded object is now (``hasattr(G['cfg'], 'OPT')`` or ``not
        hasattr(...)``, a dict's keys, a length) is built again at load from the objects of the
        day, so it must read the same there."""
        code = getattr(self.local, "guard_code", None)
        if code is None or guard_type in PER_PROCESS_GUARDS:
            return
        if isinstance(guarded_class, weakref.ref):  # what torch passes: a weak reference
            guarded_class = guarded_class()
        if guard_type in _WHOLE and getattr(self.local, "expected", None) is None:
            name = str(guard.name)
            if guarded_class is type(os.environ) or name.endswith(_ENVIRONMENT_DICTS):
                # Dynamo iterates the environment with only its length guarded, not its names.
                self.refuse("it iterates os.environ while traced")
        text = guard_code_text(code_list)
        if guard_type == "TYPE_MATCH" and isinstance(guarded_class, type):
            # The type by what it holds: a type match is by id, built again at load from the
            # class of the day under the same name.
            text = f"{text} {identity(guarded_class)}"
        self._building_set(code)[f"{guard.name} {guard_type}"] = text

    def _building_set(self, code: types.CodeType) -> dict[str, str | None]:
        """What the current build of ``code``'s guards has read so far: one set per frame
        until its build ends (torch builds a traced frame's guards twice)."""
        building = getattr(self.local, "building", None)
        if building is None:
            building = self.local.building = {}
        frame = frame_key(code)
        named: dict[str, str | None] | None = building.get(frame)
        if named is None:  # the code's digest once per build, not per value
            named = {CODE: code_digest(code)}
            building[frame] = named
        return named

    def _built(self, builder: Any) -> None:
        """A frame's guards are built: a loaded package's are compared with what the frame's
        builds recorded where it was traced (one of them must match), a traced frame's are
        recorded."""
        building = getattr(self.local, "building", None) or {}
        frame = frame_key(builder.f_code)
        built = building.pop(frame, None)
        if built is None:
            return
        expected = getattr(self.local, "expected", None)
        if expected is not None:  # a loaded package's guards, built again here
            if getattr(self.local, "stale", ""):
                return
            recorded = expected.get(frame, [])
            differences = [values_match(values, built) for values in recorded]
            if not recorded:  # a frame whose builds were not recorded: nothing to compare with
                self.local.stale = f"no values were recorded for its frame {frame}"
            elif all(differences):
                what = differences[0].replace(CODE, "its code", 1)
                self.local.stale = f"{what} is not what it was where the frame was traced"
            return
        kept = {name: value for name, value in built.items() if value is not None}
        values = getattr(self.local, "values", None)
        if values is None:
            values = self.local.values = {}
        merge_values(values, {frame: [kept]})

    def _exporting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Each guard's check is noted (:meth:`_note_guard_code`). And a guard whose object
        cannot be compared with itself (a NumPy array read as a new tensor each time) raised
        into the program the second time Dynamo builds it, which it does in the
        caching_precompile mode we turn on: see :func:`forget_incomparable_export_ref`."""

        def set_export_info(guard: Any, *args: Any, **kwargs: Any) -> Any:
            if self._noting():
                with contextlib.suppress(Exception):  # the repair must never raise into torch
                    ref = args[3] if len(args) > 3 else kwargs.get("obj_weakref")
                    forget_incomparable_export_ref(guard, ref)
                try:
                    guard_type = args[0] if args else kwargs.get("guard_type")
                    guarded_class = args[1] if len(args) > 1 else kwargs.get("guarded_class")
                    code_list = args[2] if len(args) > 2 else kwargs.get("code_list")
                    self._note_guard_code(guard, guard_type, guarded_class, code_list)
                except Exception as exc:
                    self.unsure(f"a guard's check could not be read ({exc})")
            return original(guard, *args, **kwargs)

        return set_export_info

    def _serializing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch serialises every compile's guards under caching_precompile, and raises into the
        program where it cannot (an object of a class defined inside a function: TypeError).
        That compile goes on with its guards in memory; its package is never stored."""

        def serialize_guards(manager: Any, *args: Any, **kwargs: Any) -> bytes:
            try:
                if not self.enabled:
                    return bytes(original(manager, *args, **kwargs))
                with warnings.catch_warnings():
                    # Saving the guards is the mode's, not the program's: torch's warning
                    # that this reads a non-leaf tensor's .grad is not the program's either.
                    warnings.filterwarnings("ignore", message=_NON_LEAF_GRAD_WARNING)
                    return bytes(original(manager, *args, **kwargs))
            except Exception as exc:
                if not self.enabled or _strict_precompile():
                    raise  # the program's own mode, or it asked for the error
                # torch's own bypass of a PackageError (a method set on an instance) left the
                # frame without a guards state, which torch 2.13 then asserts it has.
                self.local.problem = f"its guards cannot be saved ({exc})"
                return b""

        return serialize_guards

    def _pickling(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch saves a function its guards read by module and qualified name, and as missing
        where that name finds another object (a decorated method's inner function: the name is
        the wrapper's), which fails the guards' build on load. Such a function reached through
        ``__wrapped__`` (``functools.wraps``) is saved as that path instead."""

        def reducer_override(pickler: Any, obj: Any) -> Any:
            reduced = original(pickler, obj)
            if self.enabled and isinstance(obj, types.FunctionType) and saved_as_missing(reduced):
                path = wrapped_path(obj)
                if path is not None:
                    return unwrapped, path
            return reduced

        return reducer_override

    # -- the guards Dynamo drops --------------------------------------------------------------

    def _watching(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def make_guard_filter_entry(guard: Any, builder: Any) -> Any:
            entry = original(guard, builder)
            if self._noting():
                with contextlib.suppress(Exception):
                    self._note_guard(entry, builder)
            return entry

        return make_guard_filter_entry

    def _note_guard(self, entry: Any, builder: Any) -> None:
        derived = tuple(entry.derived_guard_types)
        if entry.guard_type not in DROPPED and not any(d in derived for d in DERIVED):
            return
        seen = getattr(self.local, "dropped", None)
        if seen is None:
            seen = self.local.dropped = {}
            self.local.frames = {}
        try:
            # Classified once the package is recorded, with the frame it was met in.
            self.local.frames[entry.name] = builder.f_code
            if not entry.has_value:
                raise Unverifiable("no value")
            seen[entry.name] = identity(entry.value)
            # An object known by name is the one its module's source defines: that source is
            # checked too (a constant, a class attribute, a default edited there).
            module = defining_module(entry.value)
            if module is not None:
                modules = getattr(self.local, "modules", None)
                if modules is None:
                    modules = self.local.modules = set()
                modules.add(module)
        except Unverifiable as exc:
            self.refuse(f"{entry.guard_type} on {entry.name}: {exc}")

    # -- the guards Dynamo drops, put back ----------------------------------------------------

    def _filtering(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A guard filter of the program's own (``torch.compile(options={"guard_filter_fn":
        ...})``) is kept: its choices are recorded, so that only the guards torch drops for
        caching_precompile are put back. The package of such a compile is not stored: another
        program, without that filter, would be served with fewer guards than it asks for."""
        signature = inspect.signature(original)

        def __init__(manager: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(manager, *args, **kwargs)
            chosen = bound.arguments.get("guard_filter_fn")
            enabled = self.enabled
            if enabled and chosen is not None:
                # Its guards are the program's choice, not a key's: no package of it is stored.
                self.refuse("compiled with a guard filter of the program's")

                def guard_filter_fn(entries: Any) -> Any:
                    kept = chosen(entries)
                    manager.__dict__[_USER_KEPT] = list(kept)
                    return kept

                bound.arguments["guard_filter_fn"] = guard_filter_fn
            before = getattr(self.local, "noting", None)
            self.local.noting = enabled  # see _noting
            try:
                original(*bound.args, **bound.kwargs)
            finally:
                self.local.noting = before

        return __init__

    def _building(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keep the first, unfiltered build of a frame's guards (torch builds them all once to
        filter, then again without the dropped ones)."""

        def build_guards(manager: Any, *args: Any, **kwargs: Any) -> Any:
            # The frame whose guards are built, for the checks noted meanwhile.
            before = getattr(self.local, "guard_code", None)
            self.local.guard_code = args[2] if len(args) > 2 else kwargs.get("f_code")
            try:
                built = original(manager, *args, **kwargs)
            finally:
                self.local.guard_code = before
            if self.enabled and kwargs.get("guard_filter_fn") is None and len(args) == 5:
                sorted_guards, _, _, _, save_guards = args
                if not save_guards:
                    manager.__dict__[_FULL] = (built, list(sorted_guards), args[1:4])
            return built

        return build_guards

    def _checking(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The guards a frame keeps in memory: those Dynamo dropped for caching_precompile put
        back (a compiled frame then recompiles where torch without caching_precompile would),
        and for a loaded package the check of its dropped guards' objects."""

        def compile_check_fn(manager: Any, builder: Any, guards: Any, *args: Any) -> Any:
            if self.enabled:
                try:
                    builder, guards = self._restore(manager, builder, guards)
                except Exception as exc:  # torch's own, filtered guards stay
                    self.cache.warn_once("torch:dynamo:guards", f"guards not restored: {exc}")
                # Before the build's values are recorded: these checks note what they expect.
                try:
                    self._guard_lookalikes(builder, guards)
                except Exception as exc:
                    self.unsure(f"what torch compares by equality could not be checked ({exc})")
                try:
                    self._built(builder)
                except Exception as exc:
                    self.unsure(f"its guards' values could not be compared ({exc})")
            return original(manager, builder, guards, *args)

        return compile_check_fn

    def _restore(self, manager: Any, builder: Any, guards: list[Any]) -> tuple[Any, list[Any]]:
        """The builder and guards ``compile_check_fn`` goes on with; ``manager`` is changed
        only once nothing more can fail."""
        full = manager.__dict__.pop(_FULL, None)
        user_kept = manager.__dict__.pop(_USER_KEPT, None)
        restoring = getattr(self.local, "restoring", None)
        chosen, chosen_manager, chosen_guards = builder, manager.guard_manager, guards
        if full is not None:
            (full_builder, full_manager), every, build_args = full
            wanted = every
            if user_kept is not None:
                # The program's own filter decided on these guards: it keeps what it kept.
                wanted = [guard for guard, keep in zip(every, user_kept, strict=True) if keep]
            if len(wanted) > len(guards):
                if wanted is not every:  # the program dropped some itself: build what it kept
                    full_builder, full_manager = manager.build_guards(wanted, *build_args, False)
                    manager.__dict__.pop(_FULL, None)
                chosen, chosen_manager, chosen_guards = full_builder, full_manager, wanted
        check = restoring.for_frame(chosen.f_code) if restoring is not None else None
        if check is not None:
            chosen_manager.root.add_lambda_guard(check[0], check[1], None)
        if chosen is not builder:
            # torch's __init__ copies the ID_MATCH'd objects (its recompile limit counts
            # entries per object) from the builder it passed here.
            builder.id_matched_objs = chosen.id_matched_objs
            manager.guard_manager = chosen_manager
        return chosen, chosen_guards
