"""Dynamo's own output from the store: a torch warm start that does not trace the program again.

Opt-in (``COMPILECACHE_TORCH_PRECOMPILE=1``). torch's ``caching_precompile`` mode makes Dynamo
keep what it produced for a ``torch.compile``'d function in a ``CompilePackage`` (the
transformed bytecode, the serialised guards, the names of the compiled backends) and look it up
when the function is compiled again (``DynamoCache.load``, before any tracing). torch keeps it
in its cache directory, written only by ``save_cache_artifacts()``. Here ``DynamoCache`` is
replaced by :class:`StoreDynamoCache`, which keeps each package, with its compiled backend, in
compilecache's store: keyed, signed, counted and carried to a fresh host like every other entry.

A package is served only where torch's own warm start would compute the same thing:

- **Our key** holds what Dynamo's guards do not see: the function (module, qualified name,
  first line) and the contents of its module's file, the torch, Triton and Python versions,
  Dynamo's, Inductor's and functorch's configuration, grad mode, the default dtype and device,
  and deterministic algorithms.
- **Sources**: the entry lists every module whose code Dynamo traced or inlined, with the
  digest of its file; a package whose files changed is not served (counted ``stale``), and the
  new trace replaces it.
- **Dropped guards**: under ``caching_precompile`` Dynamo drops the guards on object identity
  (ID_MATCH and what derives from it, CLOSURE_MATCH, WEAKREF_ALIVE, DICT_VERSION), which
  cannot be serialised. For an object reached from a global or from a cell of the function's
  closure (a module, a function, a class, an enum member, a builtin) we record what it is by
  name (and a function by its code) and check it before serving; a
  package that dropped a guard we cannot check this way (a local object's identity, a dict's
  version) is not stored. Within the process that compiles, those guards stay dropped: a
  global rebound at run time to another function is not seen (see docs/frameworks.md).
- **Complete packages only**: a package is written once every backend it names was recorded
  (the AOTAutograd entry is recorded at the first backward call), and again after a recompile
  added a backend, so an entry never names a backend it lacks (pytorch#194951).
- torch's switches: ``force_disable_caches``, ``fresh_cache()`` and AOTAutograd's cache
  switched off turn this layer off, as they turn off the graphs it is built on. A program that
  sets ``caching_precompile`` itself keeps torch's own cache.

Never raises into torch: a failure is a counted miss (torch then traces as usual).
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import functools
import hashlib
import importlib
import inspect
import itertools
import logging
import os
import pickle
import re
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from compilecache.entry import EntryHeader
from compilecache.host import installed_version, torch_versions
from compilecache.patches import Patches
from compilecache.runtime import explain, keys
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

FRAMEWORK = "torch"
LAYER = "dynamo"
PREFIX = f"{FRAMEWORK}/{LAYER}/"
EVAL_FRAME = "torch._dynamo.eval_frame"
PACKAGE = "torch._dynamo.package"
GUARDS = "torch._dynamo.guards"
CONTEXT = "torch._dynamo.precompile_context"
# The modules hooked, each as it finishes importing (the guards module is still importing when
# eval_frame is done: they import each other).
MODULES = (PACKAGE, GUARDS, CONTEXT)
# The guard kinds Dynamo drops under caching_precompile (torch/_dynamo/guards.py).
DROPPED = ("ID_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE", "DICT_VERSION")
_DERIVED = ("ID_MATCH", "DICT_VERSION")
# A guard's source as Dynamo names it: a global (G['name']) or a cell of the compiled function's
# closure (its bare name), then .attr or ['key'] steps.
_ROOT = re.compile(r"G\['([^'\\]+)'\]")
_CELL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)")
# What wraps a source in Dynamo's names (``type(x)``, ``dict(x)``, ``dict.__getitem__(x, k)``).
_CALLS_AROUND = re.compile(r"^(?:(?:type|dict|list|dict\.[a-z_]+|list\.[a-z_]+)\()+")
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
_BUILTINS_ALIAS = re.compile(r"^__builtins_dict___[0-9]+$")
_FORMAT = 1
# Chained into every key: a new recipe for the key components never meets an old entry.
_KEY_RECIPE = "torch-dynamo-1"
# The torch releases whose caching_precompile machinery the tests ran on (tests/
# test_torch_precompile.py, on 2.15 by `make compat-torch`); another is left alone.
TESTED = ("2.13.", "2.15.")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Unverifiable(Exception):
    """A dropped guard whose object cannot be named in another process."""


def identity(value: object) -> str:
    """What a global object is, by name, the same in every process that has the same one."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, types.FunctionType):
        code = value.__code__
        body = code.co_code + repr(code.co_consts).encode() + repr(code.co_names).encode()
        return f"function {value.__module__}.{value.__qualname__} {_digest(body)[:16]}"
    if isinstance(value, enum.Enum):
        kind = type(value)
        return f"enum {kind.__module__}.{kind.__qualname__}.{value.name}"
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        cls = value.__objclass__
        return f"method {cls.__module__}.{cls.__qualname__}.{value.__name__}"
    if isinstance(value, type):
        return f"type {value.__module__}.{value.__qualname__}"
    if isinstance(value, types.BuiltinFunctionType):
        # A module's builtin (len, torch._C._nn.gelu), not a method bound to some object.
        owner = getattr(value, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            return f"builtin {value.__module__}.{value.__qualname__}"
    raise Unverifiable(f"{type(value).__name__} object")


def resolve(name: str, scope: dict[str, Any], cells: dict[str, Any] | None = None) -> object:
    """The object a guard's source names, evaluated as Dynamo's own guard code evaluates it:
    ``G`` is the globals ``scope``, a bare name a cell of the compiled function's closure, and
    only the builtins Dynamo's sources use (``type``, ``dict``, ``list``...) are there. The
    source comes from an entry that passed the store's checks, like the pickle beside it."""
    if not _SOURCE.match(name.replace(", ", ",")):
        raise Unverifiable(f"not a source expression: {name!r}")
    names = {"G": scope, **(cells or {})}
    try:
        return eval(name, {"__builtins__": _SOURCE_BUILTINS}, names)
    except Exception as exc:
        raise Unverifiable(f"{name}: {type(exc).__name__}: {exc}") from exc


def _source_digest(module_name: str, files: dict[str, str]) -> str:
    """The digest of a module's file (memoised per process: files do not change under us)."""
    if module_name in files:
        return files[module_name]
    module = sys.modules.get(module_name)
    if module is None:
        module = importlib.import_module(module_name)
    path = inspect.getsourcefile(module) or getattr(module, "__file__", None)
    if not path:
        raise Unverifiable(f"module {module_name} has no source file")
    with open(path, "rb") as f:
        files[module_name] = _digest(f.read())
    return files[module_name]


class StoreDynamoCache:
    """Stands in for torch's ``DynamoCache`` (its class is mixed in at install, so every other
    method of torch's stays). ``load`` serves from the store, ``record_package`` writes once the
    package is complete."""

    def __init__(self, owner: DynamoPackages) -> None:
        self._owner = owner

    def load(self, fn: Callable[..., Any]) -> Any:
        return self._owner.load(fn)

    def record_package(self, package: Any) -> None:
        self._owner.original_record(package)
        self._owner.recorded(package)


class DynamoPackages:
    """The dynamo layer of one torch integration: lookups, writes, and the guards it checks."""

    def __init__(self, cache: Cache, patches: Patches, off: Callable[[], str]) -> None:
        self.cache = cache
        self.off = off
        self.patches = patches
        self.lock = threading.Lock()
        self.files: dict[str, str] = {}
        # Packages recorded whose backends were not all there yet: source id -> package.
        self.pending: dict[str, Any] = {}
        # Guards dropped while compiling, per thread, until the package is recorded.
        self.local = threading.local()
        self.dropped: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
        self.unverifiable: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # Why the stored package of a key was not used here (said when it is written again).
        self.stale: dict[str, str] = {}
        # The dropped guards of the packages loaded here, by key: a recompile (a new shape)
        # writes the package again, with its loaded frames, whose guards must come along.
        self.loaded: dict[str, dict[str, str]] = {}
        # Each package's key, computed where Dynamo compiled it: the write comes later (at the
        # first backward call), where torch runs with its configuration patched.
        self.keys: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, str]]] = (
            weakref.WeakKeyDictionary()
        )
        self.original_record: Callable[[Any], None] = lambda package: None
        self.package_module: Any = None
        self.context: Any = importlib.import_module(CONTEXT) if CONTEXT in sys.modules else None
        # Whether the dropped guards are seen: without it no package is written.
        self.watching = False

    # -- installing -------------------------------------------------------------------------

    def apply(self, name: str, module: Any) -> None:
        """Hook ``module`` (one of :data:`MODULES`, now imported). Raises what fails (the
        integration warns once, and that part is not hooked)."""
        if name == PACKAGE:
            self._hook_package(module)
        elif name == GUARDS:
            self.patches.wrap(
                module, "make_guard_filter_entry", self._watching, label="dynamo.guards"
            )
            self.patches.wrap(
                module.CheckFunctionManager,
                "serialize_guards",
                self._serializing,
                label="dynamo.guards_state",
            )
            self.watching = True
        elif name == CONTEXT:
            context = module.PrecompileContext
            record = context.__dict__["record_artifact"].__func__
            self.patches.replace(
                context,
                "record_artifact",
                classmethod(self._recording(record)),
                label="dynamo.artifacts",
            )
            self.context = module

    def _hook_package(self, package: Any) -> None:
        """Put the store in place of torch's DynamoCache and turn package recording on."""
        version = str(sys.modules["torch"].__version__)
        if not version.startswith(TESTED):
            self.cache.warn_once(
                "torch:dynamo:version",
                f"COMPILECACHE_TORCH_PRECOMPILE: torch {version} is not one of the versions "
                f"this was tested on ({', '.join(TESTED)}); Dynamo packages are not kept",
            )
            return
        config = importlib.import_module("torch._dynamo.config")
        chosen = os.environ.get("TORCH_CACHING_PRECOMPILE")
        if chosen is not None or getattr(config, "caching_precompile", False):
            # The program's own choice, on (torch's own Dynamo cache) or off: kept.
            explain.record_setting(
                self.cache,
                framework=FRAMEWORK,
                reason="the program set torch's caching_precompile "
                f"(TORCH_CACHING_PRECOMPILE={chosen}): compilecache keeps no Dynamo packages",
            )
            return
        self.patches.wrap(
            package.CompilePackage, "_add_user_function", self._naming, label="dynamo.names"
        )
        torch_cache = package.DynamoCache
        self.package_module = package
        self.original_record = torch_cache.record_package
        mixed: Any = type("StoreDynamoCache", (StoreDynamoCache, type(torch_cache)), {})
        ours = object.__new__(mixed)
        ours.__dict__.update(torch_cache.__dict__)
        StoreDynamoCache.__init__(ours, self)
        self.patches.replace(package, "DynamoCache", ours, label="dynamo.cache")
        self.patches.replace(config, "caching_precompile", True, label="dynamo.precompile")

    def _naming(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch records each user function a package compiles by a name another process can
        resolve, and raises where it finds none (a property's getter: GPT-2's loss_function,
        PackageError). That compile goes on as without a package; the package is never
        stored, so the next run traces as today."""

        def _add_user_function(package: Any, code: types.CodeType) -> None:
            try:
                original(package, code)
            except Exception as exc:
                if type(exc).__name__ != "PackageError":
                    raise
                module = inspect.getmodule(code)
                package._add_function(code, module.__name__ if module else code.co_filename)
                self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.unnamed")
                with self.lock:
                    self.unverifiable.setdefault(package, f"torch cannot name it: {exc}")

        return _add_user_function

    def _serializing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch serialises every compile's guards under caching_precompile, and raises into the
        program where it cannot (an object of a class defined inside a function: TypeError).
        That compile goes on with its guards in memory; its package is never stored."""

        def serialize_guards(manager: Any, *args: Any, **kwargs: Any) -> bytes:
            try:
                return bytes(original(manager, *args, **kwargs))
            except Exception as exc:
                if type(exc).__name__ == "PackageError":
                    raise  # torch's own bypass handles it (or strict_precompile asked for it)
                self.local.problem = f"its guards cannot be saved ({exc})"
                return b""

        return serialize_guards

    # -- the guards Dynamo drops --------------------------------------------------------------

    def _watching(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def make_guard_filter_entry(guard: Any, builder: Any) -> Any:
            entry = original(guard, builder)
            with contextlib.suppress(Exception):
                self._note_guard(entry)
            return entry

        return make_guard_filter_entry

    def _note_guard(self, entry: Any) -> None:
        derived = tuple(entry.derived_guard_types)
        if entry.guard_type not in DROPPED and not any(d in derived for d in _DERIVED):
            return
        seen = getattr(self.local, "dropped", None)
        if seen is None:
            seen = self.local.dropped = {}
        try:
            # A global, or a cell of the compiled function's closure (checked once the package
            # is recorded): anything else (a local, an argument) cannot be looked at on load.
            source = _CALLS_AROUND.sub("", entry.name)
            named = _ROOT.match(source) if entry.is_global else _CELL.match(source)
            if named is None or not entry.has_value:
                raise Unverifiable("neither a global nor a closure cell")
            seen[entry.name] = identity(entry.value)
        except Unverifiable as exc:
            earlier = getattr(self.local, "problem", "")
            self.local.problem = earlier or f"{entry.guard_type} on {entry.name}: {exc}"

    # -- writing ------------------------------------------------------------------------------

    def recorded(self, package: Any) -> None:
        """Dynamo finished a frame of ``package``: keep the guards it dropped, and write the
        package if its backends are all there (else when the last one is recorded)."""
        try:
            dropped = getattr(self.local, "dropped", None) or {}
            problem = getattr(self.local, "problem", "")
            self.local.dropped, self.local.problem = {}, ""
            fn = package._innermost_fn
            key = self.key_of(fn)
            cells = set(getattr(fn.__code__, "co_freevars", ()))
            for name in dropped:
                source = _CALLS_AROUND.sub("", name)
                cell = _CELL.match(source)
                if not source.startswith("G[") and (cell is None or cell.group(1) not in cells):
                    problem = problem or f"{name}: not a cell of {fn.__qualname__}'s closure"
            with self.lock:
                self.keys[package] = key
                self.dropped.setdefault(package, {}).update(dropped)
                if problem and package not in self.unverifiable:
                    self.unverifiable[package] = problem
                self.pending[package.source_id] = package
            self._write_complete()
        except Exception as exc:  # never fail Dynamo
            self.cache.warn_once("torch:dynamo:record", f"Dynamo package not kept: {exc}")

    def _recording(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def record_artifact(cls: Any, artifact: Any) -> Any:
            result = original(cls, artifact)
            with contextlib.suppress(Exception):
                if self.pending:
                    self._write_complete()
            return result

        return record_artifact

    def _write_complete(self) -> None:
        with self.lock:
            candidates = list(self.pending.items())
        for source_id, package in candidates:
            backends = self._backends(package)
            if backends is None:
                continue  # the AOTAutograd entry comes at the first backward call
            with self.lock:
                if self.pending.get(source_id) is package:
                    del self.pending[source_id]
            self._write(package, backends)

    def _backends(self, package: Any) -> dict[str, Any] | None:
        if self.context is None:
            return None
        entry = package.cache_entry()
        found: dict[str, Any] = {}
        for code in entry.codes:
            for backend_id in code.backend_ids:
                artifact = self.context.PrecompileContext.serialize_artifact_by_key(backend_id)
                if artifact is None:
                    return None
                found[backend_id] = artifact
        return found

    def _write(self, package: Any, backends: dict[str, Any]) -> None:
        if self.off():
            return
        fn = package._innermost_fn
        key, components = self.keys[package]
        problem = self.unverifiable.get(package, "")
        if not self.watching:
            problem = "the guards Dynamo drops could not be watched"
        if problem:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.unverifiable")
            log.info("compilecache: Dynamo package of %s not stored: %s", fn.__qualname__, problem)
            return
        dynamo = package.cache_entry()
        modules = {code.python_module for code in dynamo.codes}
        modules |= {source.module for source in dynamo.source_info.inlined_sources}
        try:
            sources = {name: _source_digest(name, self.files) for name in sorted(modules)}
        except Exception as exc:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.unverifiable")
            log.info("compilecache: Dynamo package of %s not stored: %s", fn.__qualname__, exc)
            return
        entry = self.package_module.PrecompileCacheEntry(dynamo=dynamo, backends=backends)
        payload = pickle.dumps(
            {
                "format": _FORMAT,
                "entry": entry,
                "sources": sources,
                "guards": {**self.loaded.get(key, {}), **self.dropped.get(package, {})},
            }
        )
        header = EntryHeader(
            framework=FRAMEWORK,
            key=key,
            name=fn.__qualname__,
            versions=_version_components(),
            components=components,
            extra={"layer": LAYER, "sources": sources},
        )
        stored = self.cache.save(header, payload, any_time=True)
        with self.lock:
            stale = self.stale.pop(key, "")
        # Written after a lookup that found nothing usable: a miss, explained as torch's graphs
        # are (the nearest stored package and what differs), or by why its own was not used.
        explain.record_miss(
            self.cache,
            framework=FRAMEWORK,
            name=fn.__qualname__,
            key=key,
            components=components,
            prefix=f"{PREFIX}{fn.__qualname__}-",
            stored=stored,
            reason="" if stored else self.cache.skip_reason(0.0, key),
            background=True,
            why=f"Dynamo's stored package was not used ({stale}); traced again" if stale else "",
        )

    # -- reading ------------------------------------------------------------------------------

    def load(self, fn: Callable[..., Any]) -> Any:
        """torch's ``DynamoCache.load``: the package for ``fn`` or ``None`` (Dynamo traces)."""
        try:
            return self._load(fn)
        except Exception as exc:  # torch then traces as without the store
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.errors")
            self.cache.warn_once("torch:dynamo:load", f"Dynamo package not loaded: {exc}")
            return None

    def _load(self, fn: Callable[..., Any]) -> Any:
        if self.off():
            return None
        eval_frame = importlib.import_module(EVAL_FRAME)
        inner = eval_frame.innermost_fn(fn)
        key, _ = self.key_of(inner)
        found = self.cache.load(FRAMEWORK, key)
        if found is None:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.misses")
            return None
        stored = pickle.loads(found.payload)
        if not isinstance(stored, dict) or stored.get("format") != _FORMAT:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.misses")
            return None
        entry = stored["entry"]
        why = self._stale(inner, entry, stored["sources"], stored["guards"])
        if why:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.stale")
            with self.lock:
                self.stale[key] = why
            log.info("compilecache: Dynamo package of %s not used: %s", inner.__qualname__, why)
            return None
        # Recorded as torch's own load does, so that the package's install finds its backends.
        context = self.context or importlib.import_module(CONTEXT)
        for backend in entry.backends.values():
            context.PrecompileContext.record_artifact(backend)
        _advance_unique_ids(found.payload)
        with self.lock:
            self.loaded[key] = dict(stored["guards"])
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.hits")
        return entry

    def _stale(self, fn: Any, entry: Any, sources: dict[str, str], guards: dict[str, str]) -> str:
        """Why the stored package may not be served here, or ``""``."""
        for name, digest in sources.items():
            try:
                current = _source_digest(name, self.files)
            except Exception as exc:
                return f"module {name} cannot be read ({exc})"
            if current != digest:
                return f"the source of {name} changed"
        for code in entry.dynamo.codes:
            # A resume function of another package (or of a compile in this process) under the
            # same name would be replaced by this one's: pytorch#195347 served the wrong code.
            scope_of = importlib.import_module(code.python_module).__dict__
            names = code.function_names if code.install_to_global else ()
            taken = [name for name in names if name in scope_of]
            if taken:
                return f"{code.python_module}.{taken[0]} is taken by another compile"
        scope = dict(sys.modules[fn.__module__].__dict__)
        for code in entry.dynamo.codes:
            for alias, module_name in code.import_sources.items():
                scope.setdefault(alias, importlib.import_module(module_name))
        for name in list(_roots(guards)):
            if _BUILTINS_ALIAS.match(name):
                scope.setdefault(name, builtins.__dict__)
        cells = _cells(fn)
        for name, expected in guards.items():
            try:
                now = identity(resolve(name, scope, cells))
            except Exception as exc:
                return f"{name} cannot be checked ({exc})"
            if now != expected:
                return f"{name} is another object ({now}, was {expected})"
        return ""

    # -- the key ------------------------------------------------------------------------------

    def key_of(self, fn: Any) -> tuple[str, dict[str, str]]:
        """Our key for ``fn``'s package, and its components (for ``explain``)."""
        torch: Any = sys.modules["torch"]
        code = fn.__code__
        components = {
            "function": f"{fn.__module__}.{fn.__qualname__}:{code.co_firstlineno}",
            "module_source": _source_digest(fn.__module__, self.files),
            **_version_components(),
            "dynamo_config": _config_digest("torch._dynamo.config"),
            "inductor_config": _config_digest("torch._inductor.config"),
            "functorch_config": _config_digest("torch._functorch.config"),
            "grad_enabled": str(torch.is_grad_enabled()),
            "default_dtype": str(torch.get_default_dtype()),
            "default_device": str(torch.get_default_device()),
            "deterministic": str(torch.are_deterministic_algorithms_enabled()),
            "cuda": _cuda_facts(torch),
        }
        return f"{PREFIX}{fn.__qualname__}-{keys.chain(_KEY_RECIPE, components)[:32]}", components


# The names Dynamo numbers with its per-process counter (``unique_id``) that a loaded package
# puts in a module's globals: resume functions, its builtins dict, compiled backends.
_NUMBERED = re.compile(rb"(?:__resume_at_[0-9]+|__builtins_dict__|__compiled_fn)_([0-9]+)")


def _advance_unique_ids(payload: bytes) -> None:
    """Move Dynamo's name counter past the numbers a loaded package uses: a later compile in
    this process would otherwise pick the same global name ("already exists in scope")."""
    numbers = [int(m.group(1)) for m in _NUMBERED.finditer(payload)]
    if not numbers:
        return
    transform: Any = importlib.import_module("torch._dynamo.bytecode_transformation")
    counter = transform._unique_id_counter
    transform._unique_id_counter = itertools.count(max(next(counter), max(numbers) + 1))


def _cells(fn: Any) -> dict[str, Any]:
    """``fn``'s closure: cell name -> contents (an empty cell is left out)."""
    names = getattr(fn.__code__, "co_freevars", ())
    found: dict[str, Any] = {}
    for name, cell in zip(names, getattr(fn, "__closure__", None) or (), strict=False):
        with contextlib.suppress(ValueError):
            found[name] = cell.cell_contents
    return found


def _roots(guards: Iterable[str]) -> Iterable[str]:
    for name in guards:
        root = _ROOT.match(name)
        if root is not None:
            yield root.group(1)


def _version_components() -> dict[str, str]:
    """torch's (and its git revision), Python's, and Triton's version when it is installed."""
    return {**torch_versions(), "triton": _triton_version()}


@functools.cache
def _triton_version() -> str:
    # Read from its metadata once per process: every key computation asks.
    return installed_version("triton") or ""


def _config_digest(module_name: str) -> str:
    module: Any = importlib.import_module(module_name)
    return _digest(_canonical(module.save_config_portable()).encode())[:32]


def _canonical(value: object) -> str:
    """A repr that is the same in every process: sets and dicts in sorted order (a set's own
    order follows the per-process string hash seed)."""
    if isinstance(value, dict):
        items = sorted((_canonical(k), _canonical(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_canonical(v) for v in value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_canonical(v) for v in value) + "]"
    return repr(value)


def _cuda_facts(torch: Any) -> str:
    if not torch.cuda.is_available():
        return "none"
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm{major}{minor} cuda {torch.version.cuda}"
