"""Dynamo's own output from the store: a torch warm start that does not trace the program again.

On by default for the torch releases in :data:`TESTED` (``COMPILECACHE_TORCH_PRECOMPILE=0`` turns
it off; ``=1`` on another release warns that it is left off).
torch's ``caching_precompile`` mode makes Dynamo keep what it produced for a ``torch.compile``'d
function in a ``CompilePackage`` (the transformed bytecode, the serialised guards, the names of
the compiled backends) and look it up when the function is compiled again
(``DynamoCache.load``, before any tracing). torch keeps it in its cache directory, written only
by ``save_cache_artifacts()``. Here ``DynamoCache`` is replaced by :class:`StoreDynamoCache`,
which keeps each package, with its compiled backend, in compilecache's store: keyed, signed,
counted and carried to a fresh host like every other entry. A backend is AOTAutograd's entry in
plain torch's form (torch's mode would bundle it, under a key no other process finds): it names
its FX graphs, which the store serves when the package is installed, and AOTAutograd's cache,
its keys and ``save_cache_artifacts()`` stay exactly plain torch's.

A package is served only where torch's own warm start would compute the same thing:

- **Our key** holds what Dynamo's guards do not see: the function (module, qualified name,
  first line) and the contents of its module's file, what the torch.compile call asked for
  (Inductor's mode and options, ``dynamic``, ``fullgraph``; another backend is not kept), the
  torch, Triton and Python versions, Dynamo's, Inductor's and functorch's configuration, the
  thread count, grad mode, the default dtype and device, and deterministic algorithms.
- **Sources**: the entry lists every module whose code Dynamo traced or inlined, with the
  digest of its file; a package whose files changed is not served (counted ``stale``), and the
  new trace replaces it.
- **Dropped guards**: under ``caching_precompile`` Dynamo drops the guards on object identity
  (ID_MATCH and what derives from it, CLOSURE_MATCH, WEAKREF_ALIVE, DICT_VERSION), which cannot
  be serialised. In the process that traces, they are put back in memory (the frame keeps the
  guards torch builds without the mode; only the saved copy leaves them out). The entry records
  each by what its object is, by name (``torch_dynamo_guards``); a load checks those reached
  from globals and closure cells, and every frame it installs checks all of them on each call.
  A package that dropped a guard that cannot be named (an instance, a dict's version) is not
  stored.
- **Loadable packages only**: before a package is written its guards are built again from their
  saved state (as torch's install does) and every global Dynamo made that its code reads must be
  installed by it where that code looks. Where torch's own mode fails on transformers' models,
  ``torch_dynamo_repairs`` mends it. An install that still fails leaves the package fresh:
  Dynamo traces.
- **Complete packages only**: a package is written once every backend it names was recorded
  (the AOTAutograd entry is recorded at the first backward call), and again after a recompile
  added a backend, so an entry never names a backend it lacks (pytorch#194951).
- torch's switches: ``force_disable_caches``, ``fresh_cache()`` and AOTAutograd's cache
  switched off turn this layer off, as they turn off the graphs it is built on. A program that
  sets ``caching_precompile`` itself keeps torch's own cache: set before torch is imported
  (``TORCH_CACHING_PRECOMPILE``), nothing is hooked; set later (``torch._dynamo.config.patch``,
  as PyTorch's ``test_cache_hot_load_caching_precompile``), the mode is the program's while it
  holds, and torch's own Dynamo cache serves it, hot-loaded artifacts included. The mode
  compilecache turns on is the value :data:`OURS`, which a program's ``True`` replaces and a
  patch's exit restores.

Never raises into torch: a failure is a counted miss (torch then traces as usual).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import inspect
import logging
import os
import pickle
import sys
import threading
import time
import types
import weakref
from collections import ChainMap, deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from compilecache.entry import EntryHeader
from compilecache.frameworks.torch.dynamo.guards import (
    BUILTINS_ALIAS,
    CALLS_AROUND,
    DERIVED,
    DROPPED,
    GLOBAL_ROOT,
    LOCAL_ROOT,
    NAME_ROOT,
    Dropped,
    DroppedGuards,
    Unverifiable,
    closure_cells,
    frame_key,
    global_roots,
    identity,
    merge_dropped,
    resolve,
    scope_of,
)
from compilecache.frameworks.torch.dynamo.key import (
    FRAMEWORK,
    LAYER,
    PREFIX,
    compile_options,
    package_key,
    readable,
    source_digest,
    version_components,
)
from compilecache.frameworks.torch.dynamo.repairs import (
    advance_unique_ids,
    forget_incomparable_export_ref,
    frame_globals,
    install_root_globals,
    property_accessor,
    saved_as_missing,
    unprovided_global,
    unwrapped,
    wrapped_path,
)
from compilecache.host import cpu_target
from compilecache.patches import Patches
from compilecache.runtime import explain
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

EVAL_FRAME = "torch._dynamo.eval_frame"
PACKAGE = "torch._dynamo.package"
GUARDS = "torch._dynamo.guards"
CONTEXT = "torch._dynamo.precompile_context"
OUTPUT = "torch._dynamo.output_graph"
# Hooked by the torch integration's own hook of this module (see DynamoPackages._aot_key).
AUTOGRAD_CACHE = "torch._functorch._aot_autograd.autograd_cache"
AOT_RESULT = "torch._functorch._aot_autograd.aot_autograd_result"
FUNCTORCH_CONFIG = "torch._functorch.config"
STANDALONE = "torch._inductor.standalone_compile"
DYNAMO = "torch._dynamo"
DYNAMO_CONFIG = "torch._dynamo.config"
# The modules hooked, each as it finishes importing (the guards module is still importing when
# eval_frame is done: they import each other).
MODULES = (EVAL_FRAME, PACKAGE, GUARDS, CONTEXT, OUTPUT, STANDALONE, DYNAMO)
_FORMAT = 1
# Set on a CheckFunctionManager while it builds its guards (see DynamoPackages._restore).
_FULL = "_compilecache_full_build"
_USER_KEPT = "_compilecache_user_kept"
# The torch releases whose caching_precompile machinery the tests ran on (tests/
# test_torch_precompile.py, on 2.14 and 2.15 by `make compat-torch`); another is left alone.
TESTED = ("2.13.", "2.14.", "2.15.")
# What compilecache sets ``caching_precompile`` to: true for torch (which only asks ``if
# config.caching_precompile``), and not the ``True`` a program sets: while the program's own
# ``True`` holds, the mode is the program's (torch's own Dynamo cache, as in plain torch).
OURS = 1


def mode_is_ours(value: object) -> bool:
    """Whether ``caching_precompile``'s current value is the one compilecache set."""
    return type(value) is int and value == OURS


# What Dynamo logs for each guard caching_precompile drops (torch/_dynamo/guards.py).
_DROPPED_GUARD_WARNING = "guard on %s is dropped with caching_precompile=True"


def _install_reason(exc: Exception) -> str:
    """Why torch could not install a package, in words (torch's own exception names are terse)."""
    name = type(exc).__name__
    if name == "FXGraphCacheMiss":  # raised without a message
        return "a compiled graph it needs is not in the cache"
    try:
        text = str(exc)
    except Exception:  # an exception whose message cannot be made: its name is enough
        text = ""
    return f"{name}: {text}" if text else name


class _QuietDroppedGuards(logging.Filter):
    """Keeps Dynamo's warnings about guards that package mode drops out of the program's
    output while the mode is compilecache's (the program did not ask for it, and the guards are
    put back in memory); compilecache's debug log keeps them."""

    def __init__(self, packages: DynamoPackages) -> None:
        super().__init__()
        self.packages = packages

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.packages.enabled or _DROPPED_GUARD_WARNING not in str(record.msg):
            return True
        with contextlib.suppress(Exception):
            log.debug("compilecache: torch: %s (put back in memory)", record.getMessage())
        return False


def last_frame_compile_s() -> float:
    """How long Dynamo's last frame compile took, its tracing and its backends' compiles
    (torch's own timing, ``_compile.compile_inner``); 0 where torch does not say."""
    try:
        utils: Any = sys.modules["torch._dynamo.utils"]
        times = utils.compilation_time_metrics.get("_compile.compile_inner") or ()
        return float(times[-1]) if times else 0.0
    except Exception:
        return 0.0


def packageable(fn: Any) -> bool:
    """Whether torch's package mode can hold a compile of ``fn``: what it keys its package by
    (a module's ``forward``, else ``fn``, unwrapped as torch unwraps it) is Python code of its
    own. A class, a builtin or torch op, a ``functools.partial`` or a callable object is not."""
    torch: Any = sys.modules.get("torch")
    target = fn
    if torch is not None and isinstance(fn, torch.nn.Module):
        target = fn.forward
    try:
        target = importlib.import_module(EVAL_FRAME).innermost_fn(target)
    except Exception:
        return False
    if isinstance(target, type):
        return False
    return isinstance(getattr(target, "__code__", None), types.CodeType)


def record_portable(backends: Mapping[str, Any], aot_keys: Mapping[str, str]) -> None:
    """Record a served package's AOTAutograd entries for ``save_cache_artifacts()``, as the
    AOTAutograd hits the package stands for would have been: the artifacts of a process warm
    from a package serve plain torch as those of plain torch's warm process do."""
    with contextlib.suppress(Exception):  # only torch's portable artifacts would lack them
        manager = importlib.import_module("torch.compiler._cache").CacheArtifactManager
        for backend_id, key in aot_keys.items():
            backend = backends.get(backend_id)
            if backend is not None:
                manager.record_artifact("aot_autograd", key, pickle.dumps(backend.content))


def detach_package(context: Any) -> None:
    """Take the (not yet initialised) package out of a torch.compile context and out of the
    frame converter it compiles with (``ConvertFrame`` and the ``ConvertFrameAssert`` inside
    it): that compile then runs as with package mode off."""
    package = getattr(context, "_package", None)
    if package is None or package.is_initialized():
        return
    context._package = None
    callback = getattr(context, "callback", None)
    for holder in (callback, getattr(callback, "_inner_convert", None)):
        if holder is not None and getattr(holder, "_package", None) is package:
            holder._package = None


class StoreDynamoCache:
    """Stands in for torch's ``DynamoCache`` (its class is mixed in at install, so every other
    method of torch's stays). ``load`` serves from the store, ``record_package`` writes once the
    package is complete."""

    def __init__(self, owner: DynamoPackages) -> None:
        self._owner = owner

    def load(self, fn: Callable[..., Any]) -> Any:
        if not self._owner.enabled:  # the program's own mode: torch's own cache
            return self._owner.original_load(fn)
        return self._owner.load(fn)

    def record_package(self, package: Any) -> None:
        self._owner.original_record(package)
        self._owner.recorded(package)

    def clear(self) -> None:
        """torch's ``DynamoCache.clear()``, then: no package stored before it is served here."""
        self._owner.original_clear()
        self._owner.cleared()


class DynamoPackages:
    """The dynamo layer of one torch integration: lookups, writes, and the guards it checks."""

    def __init__(
        self,
        cache: Cache,
        patches: Patches,
        off: Callable[[], str],
        *,
        asked: bool = False,
        switches: PackageSwitches | None = None,
    ) -> None:
        self.cache = cache
        # torch's clear()s, as they touch packages (switches.Switches in the integration).
        self.switches: PackageSwitches = switches or _NoSwitches()
        # Whether COMPILECACHE_TORCH_PRECOMPILE=1 asked for it (then an untested torch warns).
        self.asked = asked
        self.off = off
        self.patches = patches
        self.lock = threading.Lock()
        self.files: dict[str, str] = {}
        # Packages recorded whose backends were not all there yet: source id -> package.
        self.pending: dict[str, Any] = {}
        # Guards dropped while compiling, per thread, until the package is recorded.
        self.local = threading.local()
        # The guards dropped per package: a frame's key (frame_key) -> source -> identity().
        self.dropped: weakref.WeakKeyDictionary[Any, Dropped] = weakref.WeakKeyDictionary()
        self.unverifiable: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # Why the stored package of a key was not used here (said when it is written again).
        self.stale: dict[str, str] = {}
        # The dropped guards of the packages loaded here, by key: a recompile (a new shape)
        # writes the package again, with its loaded frames, whose guards must come along.
        self.loaded: dict[str, Dropped] = {}
        # Each package's key, computed where Dynamo compiled it: the write comes later (at the
        # first backward call), where torch runs with its configuration patched.
        self.keys: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, str]]] = (
            weakref.WeakKeyDictionary()
        )
        # What each package's torch.compile call asked for (compile_options), noted where the
        # call looks its package up: None for a backend other than Inductor.
        self.compiles: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
        self.original_load: Callable[[Any], Any] = lambda fn: None
        self.original_record: Callable[[Any], None] = lambda package: None
        self.original_clear: Callable[[], None] = lambda: None
        # The packages installed here, taken out again by torch._dynamo.reset(). Held strongly:
        # what they installed on their function's code outlives the torch.compile wrapper.
        self.installed: list[Any] = []
        # Whether this process writes each key's package: it loaded it, or took the key's lease
        # where it missed (the others that missed at once leave it to that one: Cache.claim_writer).
        self.writers: dict[str, bool] = {}
        self.package_module: Any = None
        self.context: Any = importlib.import_module(CONTEXT) if CONTEXT in sys.modules else None
        # Whether the dropped guards are seen: without it no package is written.
        self.watching = False
        # Whether caching_precompile was turned on by us (see enabled).
        self.hooked = False
        # Each backend's AOTAutograd key (a backend is that entry): a package served here
        # records its entries for save_cache_artifacts() as the AOTAutograd hit it replaces.
        self.aot_keys: dict[str, str] = {}
        # What each package's frames took to compile (tracing and backends): what a hit saves.
        self.compile_s: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        # Recent kernel builds, (when each ended, how long it took): those within a frame's
        # compile are not its package's time.
        self._kernel_builds: deque[tuple[float, float]] = deque(maxlen=1000)

    @property
    def enabled(self) -> bool:
        """Whether caching_precompile is on because of us now (then packages come from the
        store and Dynamo's dropped guards are put back): hooked, and not set by the program
        since (its ``True``, a ``config.patch`` of its own: torch's own mode then, as plain)."""
        if not self.hooked:
            return False
        config = sys.modules.get(DYNAMO_CONFIG)
        return config is not None and mode_is_ours(getattr(config, "caching_precompile", None))

    # -- installing -------------------------------------------------------------------------

    def apply(self, name: str, module: Any) -> None:
        """Hook ``module`` (one of :data:`MODULES`, now imported). Raises what fails (the
        integration warns once, and that part is not hooked)."""
        if name == EVAL_FRAME:
            self.patches.wrap(
                module._TorchDynamoContext, "__call__", self._calling, label="dynamo.compile_call"
            )
        elif name == PACKAGE:
            self._hook_package(module)
        elif name == GUARDS:
            self.patches.wrap(
                module, "make_guard_filter_entry", self._watching, label="dynamo.guards"
            )
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
            guard = importlib.import_module("torch._guards").Guard
            self.patches.wrap(
                guard, "set_export_info", self._exporting, label="dynamo.guard_export"
            )
            self.watching = True
        elif name == DYNAMO:
            self.patches.wrap(module, "reset_code_caches", self._resetting, label="dynamo.reset")
        elif name == STANDALONE:
            self.patches.wrap(module, "standalone_compile", self._plain, label="dynamo.standalone")
            load = module.CompiledArtifact.__dict__["load"].__func__
            self.patches.replace(
                module.CompiledArtifact,
                "load",
                staticmethod(self._plain(load)),
                label="dynamo.standalone_load",
            )
        elif name == AUTOGRAD_CACHE:
            self.patches.wrap(
                module.AOTAutogradCachePickler,
                "_reduce_aot_config",
                self._aot_key,
                label="dynamo.aot_key",
            )
            if hasattr(module, "sanitize_gm_for_cache"):
                self.patches.wrap(
                    module, "sanitize_gm_for_cache", self._sanitizing, label="dynamo.aot_graph"
                )
            cache = module.AOTAutogradCache
            for method, make in (("save", self._saving), ("_lookup", self._looking_up)):
                function = cache.__dict__[method].__func__  # staticmethods
                self.patches.replace(
                    cache, method, staticmethod(make(function)), label=f"dynamo.aot_{method}"
                )
        elif name == OUTPUT:
            self.patches.wrap(
                module.OutputGraph,
                "install_global_by_id",
                self._globals,
                label="dynamo.module_globals",
            )
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
            said = (
                f"torch {version} is not one of the releases Dynamo packages were tested on "
                f"({', '.join(TESTED)}); they are not kept"
            )
            if self.asked:
                self.cache.warn_once(
                    "torch:dynamo:version", f"COMPILECACHE_TORCH_PRECOMPILE: {said}"
                )
            else:
                log.debug("compilecache: %s", said)
            return
        config = importlib.import_module(DYNAMO_CONFIG)
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
        self.original_load = torch_cache.load
        self.original_record = torch_cache.record_package
        self.original_clear = torch_cache.clear
        mixed: Any = type("StoreDynamoCache", (StoreDynamoCache, type(torch_cache)), {})
        ours = object.__new__(mixed)
        ours.__dict__.update(torch_cache.__dict__)
        StoreDynamoCache.__init__(ours, self)
        self.patches.replace(package, "DynamoCache", ours, label="dynamo.cache")
        self.patches.wrap(
            package.CompilePackage, "install", self._installing, label="dynamo.install"
        )
        self.patches.replace(config, "caching_precompile", OURS, label="dynamo.precompile")
        self.hooked = True

    def _resetting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch._dynamo.reset()`` leaves what a loaded package installed on its function's
        code (torch's precompile entries), so the package went on serving after a reset meant
        to start Dynamo afresh (after a changed setting, a cleared cache). It is taken out."""

        def reset_code_caches(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            with self.lock:
                installed = list(self.installed)
                self.installed.clear()
            for package in installed:
                with contextlib.suppress(Exception):
                    package.uninstall()
            return result

        return reset_code_caches

    def _plain(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``standalone_compile`` and the load of its artifacts run as in plain torch: in
        caching_precompile mode torch bundles AOTAutograd entries, which changes what a saved
        artifact holds and what its caches count. Packages are for torch.compile only. The mode
        is turned off only around such a call, which makes no package: a ``torch.compile`` made
        with the mode on and compiled with it off fails inside torch ("check_fn.guards_state
        must not be None"), so it stays on elsewhere, inside ``fresh_cache()`` too."""

        @functools.wraps(original)
        def plain(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            config: Any = importlib.import_module(DYNAMO_CONFIG)
            with config.patch(caching_precompile=False):
                return original(*args, **kwargs)

        return plain

    def _exporting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A guard whose object cannot be compared with itself (a NumPy array read as a new
        tensor each time) raised into the program the second time Dynamo builds it, which it
        does in the caching_precompile mode we turn on: see
        :func:`forget_incomparable_export_ref`."""

        def set_export_info(guard: Any, *args: Any, **kwargs: Any) -> Any:
            if self.enabled:
                with contextlib.suppress(Exception):  # the repair must never raise into torch
                    ref = args[3] if len(args) > 3 else kwargs.get("obj_weakref")
                    forget_incomparable_export_ref(guard, ref)
            return original(guard, *args, **kwargs)

        return set_export_info

    def _aot_key(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Under caching_precompile torch puts the compiled graph's name, which ends in a
        random uuid (``__compiled_fn_1_<uuid>``), into AOTAutograd's cache key: no entry would
        ever be found again by another process, nor by plain torch. The key leaves it out, so
        that it is the key plain torch computes: the entries written here (to the store, to
        torch's directory, to ``save_cache_artifacts()``) are plain torch's, and plain torch's
        serve here."""

        def _reduce_aot_config(pickler: Any, aot_config: Any) -> Any:
            reduced = original(pickler, aot_config)
            name = getattr(aot_config, "precompile_backend_id", None)
            if not self.enabled or name is None:
                return reduced
            rebuild, fields = reduced
            fields = tuple(None if field == name else field for field in fields)
            return rebuild, fields

        return _reduce_aot_config

    def _sanitizing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """AOTAutograd's key pickles the graph module's attributes in their order. Dynamo sets
        ``_backend_id`` on a package's graph before its other attributes; plain torch never sets
        it, and the key's sanitising adds it last. Moved last here, so that the key is plain
        torch's."""

        def sanitize_gm_for_cache(gm: Any) -> Any:
            if self.enabled:
                with contextlib.suppress(Exception):
                    attributes = gm.__dict__
                    if "_backend_id" in attributes:
                        attributes["_backend_id"] = attributes.pop("_backend_id")
            return original(gm)

        return sanitize_gm_for_cache

    def bundling(self, original: Callable[[], bool]) -> Callable[[], bool]:
        """torch's ``should_bundle_autograd_cache``: caching_precompile makes AOTAutograd bundle
        its compiled graphs into its entries, a form plain torch neither writes nor reads (its
        FX graph cache is not asked on a hit). While the mode is ours, AOTAutograd's cache
        answers as without it: its entries are plain torch's, and each package's backend is
        recorded from them (:meth:`_saving`, :meth:`_looking_up`)."""

        @functools.wraps(original)
        def should_bundle_autograd_cache() -> bool:
            if self.enabled:
                functorch = sys.modules.get(FUNCTORCH_CONFIG)
                return bool(getattr(functorch, "bundled_autograd_cache", False))
            return bool(original())

        return should_bundle_autograd_cache

    def _saving(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``AOTAutogradCache.save``: the entry is saved as plain torch saves it (without the
        package's backend name), then recorded as that backend of the package."""

        def save(key: str, entry: Any, remote: bool) -> Any:
            config: Any = getattr(entry, "sanitized_aot_config", None)
            backend_id = getattr(config, "precompile_backend_id", None) if self.enabled else None
            if backend_id is not None:
                config.precompile_backend_id = None
            result = original(key, entry, remote)
            if backend_id is not None:
                self._record_backend(backend_id, key, entry)
            return result

        return save

    def _looking_up(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``AOTAutogradCache._lookup``: a hit for a package's compile is recorded as that
        backend of the package, as torch does for its bundled entries."""

        def _lookup(*args: Any, **kwargs: Any) -> Any:
            found = original(*args, **kwargs)
            if found is not None and self.enabled:
                aot_config = args[5] if len(args) > 5 else kwargs.get("aot_config")
                backend_id = getattr(aot_config, "precompile_backend_id", None)
                if backend_id is not None:
                    with contextlib.suppress(Exception):  # the hit stands; no package then
                        self._record_backend(backend_id, args[0], pickle.loads(found[1]))
            return found

        return _lookup

    def _record_backend(self, backend_id: str, key: str, entry: Any) -> None:
        """Record ``entry`` (an AOTAutogradResult, plain or bundled; AOTAutograd's ``key``) as
        the package backend ``backend_id``. torch's artifact for it turns the entry into the
        compiled function on load (``deserialize_bundled_cache_entry``): a plain entry loads
        its forward and backward from the FX graph cache then, as a plain AOTAutograd hit
        does."""
        entry.sanitized_aot_config.precompile_backend_id = None
        with self.lock:
            self.aot_keys[backend_id] = key
        artifact = importlib.import_module(AOT_RESULT).BundledAOTAutogradCacheArtifact
        context = self.context or importlib.import_module(CONTEXT)
        context.PrecompileContext.record_artifact(artifact(backend_id, entry))

    def _calling(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch.compile's context applied to a function: it looks the package up (our
        :meth:`load`) inside this call, where the backend and its options are known."""

        def __call__(context: Any, fn: Any) -> Any:
            if self.enabled and not packageable(fn):
                # torch's package mode reads the function's code: a class, a builtin or a
                # partial has none, and torch would raise into the program (AttributeError).
                # Such a compile runs as in plain torch, without a package.
                detach_package(context)
            # torch calls itself for a class's __call__ (2.15): the outer context comes back.
            outer = getattr(self.local, "context", None)
            self.local.context = context
            try:
                return original(context, fn)
            finally:
                self.local.context = outer

        return __call__

    def _naming(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch records each user function a package compiles by a name another process can
        resolve, and raises where it finds none (PackageError). A property's getter or setter
        (GPT-2's ``loss_function``) is named here, as torch's own lookup on load reads it
        (``Class.prop`` then ``fget.__code__``). Another: that compile goes on as without a
        package; the package is never stored, so the next run traces as today."""

        def _add_user_function(package: Any, code: types.CodeType) -> None:
            try:
                original(package, code)
            except Exception as exc:
                if type(exc).__name__ != "PackageError" or not self.enabled:
                    raise
                module = inspect.getmodule(code)
                name = module.__name__ if module else code.co_filename
                accessor = property_accessor(module, code)
                if accessor is not None:
                    package._add_function(
                        code, name, function_name=code.co_qualname, code_source=accessor
                    )
                    return
                package._add_function(code, name)
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
                if type(exc).__name__ == "PackageError" or not self.enabled:
                    raise  # torch's own bypass handles it (or strict_precompile asked for it)
                self.local.problem = f"its guards cannot be saved ({exc})"
                return b""

        return serialize_guards

    def _globals(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A module the transformed code loads through a global Dynamo made for it
        (``___module_collections_<id>_c5``) is one more import of the package: torch does not
        record it, and a loaded frame raised NameError."""

        def install_global_by_id(graph: Any, prefix: str, value: Any) -> str:
            name = str(original(graph, prefix, value))
            package = getattr(graph, "package", None)
            if self.enabled and package is not None and isinstance(value, types.ModuleType):
                with contextlib.suppress(Exception):
                    if importlib.import_module(value.__name__) is value:
                        package.add_import_source(name, value.__name__)
            return name

        return install_global_by_id

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
            if self.enabled:
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
        except Unverifiable as exc:
            earlier = getattr(self.local, "problem", "")
            self.local.problem = earlier or f"{entry.guard_type} on {entry.name}: {exc}"

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
            if self.enabled and chosen is not None:
                # Its guards are the program's choice, not a key's: no package of it is stored.
                earlier = getattr(self.local, "problem", "")
                self.local.problem = earlier or "compiled with a guard filter of the program's"

                def guard_filter_fn(entries: Any) -> Any:
                    kept = chosen(entries)
                    manager.__dict__[_USER_KEPT] = list(kept)
                    return kept

                bound.arguments["guard_filter_fn"] = guard_filter_fn
            original(*bound.args, **bound.kwargs)

        return __init__

    def _building(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keep the first, unfiltered build of a frame's guards (torch builds them all once to
        filter, then again without the dropped ones)."""

        def build_guards(manager: Any, *args: Any, **kwargs: Any) -> Any:
            built = original(manager, *args, **kwargs)
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

    def _installing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A loaded package's guard managers are built in its ``install``: the check of its
        dropped guards (set by :meth:`_load`) goes into each, and no further. An install that
        fails leaves the package fresh, so Dynamo traces (torch's own fallback catches only a
        RuntimeError, and then raises on the package it left initialised)."""

        def install(package: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.enabled:  # the program's own mode: torch's own install
                return original(package, *args, **kwargs)
            try:
                installed = original(package, *args, **kwargs)
                install_root_globals(package)
                with self.lock:
                    self.installed.append(package)
                return installed
            except Exception as exc:
                self._install_failed(package, exc)
                return None
            finally:
                self.local.restoring = None

        return install

    def _install_failed(self, package: Any, exc: Exception) -> None:
        fn = package._innermost_fn
        with contextlib.suppress(Exception):
            package.uninstall()
        package.__init__(None)
        package.initialize(fn, None, ignore_inlined_sources=False)
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.errors")
        self.cache.warn_once(
            "torch:dynamo:install",
            f"a Dynamo package from the cache could not be installed ({_install_reason(exc)}); "
            "Dynamo traces and compiles its frames as without the cache",
        )
        with contextlib.suppress(Exception):
            key, _ = self.key_of(fn, str(self.compiles[package]))
            with self.lock:
                self.stale[key] = f"torch could not install it ({type(exc).__name__})"

    # -- writing ------------------------------------------------------------------------------

    def kernel_built(self, seconds: float) -> None:
        """A kernel binary was built (counted in its own entry, so not in its package's)."""
        with self.lock:
            self._kernel_builds.append((time.monotonic(), seconds))

    def recorded(self, package: Any) -> None:
        """Dynamo finished a frame of ``package``: keep the guards it dropped, and write the
        package if its backends are all there (else when the last one is recorded)."""
        try:
            dropped = getattr(self.local, "dropped", None) or {}
            frames = getattr(self.local, "frames", None) or {}
            problem = getattr(self.local, "problem", "")
            self.local.dropped, self.local.frames, self.local.problem = {}, {}, ""
            fn = package._innermost_fn
            compile_call = self.compiles.get(package)
            if compile_call is None:
                # Another backend than Inductor (or a package not made by torch.compile's
                # lookup): torch's own mode would serve it to any backend; we keep none.
                return
            key = self.key_of(fn, compile_call)
            found: Dropped = {}
            for name, named in dropped.items():
                scope = scope_of(name, frames.get(name))
                if scope is None:
                    problem = problem or f"{name}: neither a global, a cell nor an argument"
                else:
                    found.setdefault(scope, {})[name] = named
            with self.lock:
                self.keys[package] = key
                # A hit saves the frame's compile; the kernels built meanwhile are their entries'.
                frame_s = last_frame_compile_s()
                since = time.monotonic() - frame_s
                kernels_s = sum(s for end, s in self._kernel_builds if end >= since)
                own = max(0.0, frame_s - kernels_s)
                self.compile_s[package] = self.compile_s.get(package, 0.0) + own
                known = self.dropped.setdefault(package, {})
                problem = problem or merge_dropped(known, found)
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
        fn = package._innermost_fn
        key, components = self.keys[package]
        if self.off() or not self.writers.get(key, True):
            return  # another process that missed at once writes it
        try:
            self._write_package(package, backends, fn, key, components)
        finally:
            self.cache.finish_lead(key)

    def _write_package(
        self,
        package: Any,
        backends: dict[str, Any],
        fn: Any,
        key: str,
        components: dict[str, str],
    ) -> None:
        problem = self.unverifiable.get(package, "")
        if not self.watching:
            problem = "the guards Dynamo drops could not be watched"
        problem = problem or unprovided_global(package) or self._unloadable(package)
        if problem:
            self._not_stored(fn, problem)
            return
        dynamo = package.cache_entry()
        modules = {code.python_module for code in dynamo.codes}
        modules |= {source.module for source in dynamo.source_info.inlined_sources}
        try:
            sources = {name: source_digest(name, self.files) for name in sorted(modules)}
        except Exception as exc:
            self._not_stored(fn, str(exc))
            return
        guards = {scope: dict(named) for scope, named in self.loaded.get(key, {}).items()}
        problem = merge_dropped(guards, self.dropped.get(package, {}))
        if problem:
            # A frame loaded for one object and a frame traced for another: one entry cannot
            # say which is which.
            self._not_stored(fn, problem)
            return
        entry = self.package_module.PrecompileCacheEntry(dynamo=dynamo, backends=backends)
        with self.lock:
            aot_keys = {b: self.aot_keys[b] for b in backends if b in self.aot_keys}
        payload = pickle.dumps(
            {
                "format": _FORMAT,
                "entry": entry,
                "sources": sources,
                "guards": guards,
                "aot_keys": aot_keys,
            }
        )
        header = EntryHeader(
            framework=FRAMEWORK,
            key=key,
            name=fn.__qualname__,
            compile_time_s=self.compile_s.get(package, 0.0),
            versions=version_components(),
            components=components,
            # The backends' output code is generated for this CPU: checked on every read.
            extra={
                "layer": LAYER,
                "sources": sources,
                "readable": readable(components),
                "cpu": cpu_target(),
            },
        )
        stored = self.cache.save(header, payload, any_time=True)
        if stored:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.writes")
            self.switches.wrote(LAYER, key)
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
            readable=readable(components),
            prefix=f"{PREFIX}{fn.__qualname__}-",
            stored=stored,
            reason="" if stored else self.cache.skip_reason(0.0, key),
            background=True,
            why=f"Dynamo's stored package was not used ({stale}); traced again" if stale else "",
        )

    def _not_stored(self, fn: Any, problem: str) -> None:
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.unverifiable")
        log.info("compilecache: Dynamo package of %s not stored: %s", fn.__qualname__, problem)

    def _unloadable(self, package: Any) -> str:
        """Why torch could not install ``package`` in another process (``""`` where it could):
        each frame's guards are built again from their saved state, as its install does (a
        decorated function torch saved as missing: GPT-2's guards on ``L['func']``)."""
        module = self.package_module
        saved = {name: getattr(self.local, name, None) for name in ("dropped", "frames", "problem")}
        try:
            for code, entry in list(package._codes.items()):
                target = module._lookup_code(entry) if entry.code_source else code
                scope = sys.modules[entry.python_module].__dict__
                for guarded in entry.guarded_codes:
                    state = module.load_guards_state(guarded.guards_state)
                    module.load_guard_manager(state, target, scope)
        except Exception as exc:
            return f"torch could not load its guards ({type(exc).__name__}: {exc})"
        finally:
            for name, value in saved.items():
                setattr(self.local, name, value)
        return ""

    def cleared(self) -> None:
        """torch's ``DynamoCache.clear()``: packages stored before it are not served here."""
        self.switches.cleared(LAYER)

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
        context: Any = getattr(self.local, "context", None)
        compile_call = compile_options(context)
        if context is not None:
            with self.lock:
                self.compiles[context._package] = compile_call
        if compile_call is None:
            return None  # not Inductor: traced as without the store, never stored
        key, _ = self.key_of(inner, compile_call)
        if not self.switches.serves_package(key):
            return None  # a clear() in this process: traced, and written again
        found = self.cache.load(FRAMEWORK, key)
        if found is None:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.misses")
            self.writers[key] = self.cache.claim_writer(key)
            return None
        stored = pickle.loads(found.payload)
        if not isinstance(stored, dict) or stored.get("format") != _FORMAT:
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.misses")
            self.writers[key] = self.cache.claim_writer(key)
            return None
        entry = stored["entry"]
        why, restoring = self._stale(inner, entry, stored["sources"], stored["guards"])
        if why:
            self.writers[key] = self.cache.claim_writer(key)
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.stale")
            with self.lock:
                self.stale[key] = why
            log.info("compilecache: Dynamo package of %s not used: %s", inner.__qualname__, why)
            return None
        # Recorded as torch's own load does, so that the package's install finds its backends.
        context = self.context or importlib.import_module(CONTEXT)
        for backend in entry.backends.values():
            context.PrecompileContext.record_artifact(backend)
        record_portable(entry.backends, stored.get("aot_keys", {}))
        advance_unique_ids(found.payload)
        # torch installs the package next, in this thread: its guard managers get the check.
        self.local.restoring = restoring
        with self.lock:
            self.loaded[key] = stored["guards"]
            self.writers[key] = True  # a recompile here (a new shape) writes the whole package
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.hits")
        return entry

    def _stale(
        self, fn: Any, entry: Any, sources: dict[str, str], dropped: Dropped
    ) -> tuple[str, DroppedGuards | None]:
        """Why the stored package may not be served here (``""`` where it may), and the check
        of its dropped guards to put into its guard managers."""
        for name, recorded in sources.items():
            try:
                current = source_digest(name, self.files)
            except Exception as exc:
                return f"module {name} cannot be read ({exc})", None
            if current != recorded:
                return f"the source of {name} changed", None
        for code in entry.dynamo.codes:
            # A resume function of another package (or of a compile in this process) under the
            # same name would be replaced by this one's: pytorch#195347 served the wrong code.
            scope_of = importlib.import_module(code.python_module).__dict__
            names = code.function_names if code.install_to_global else ()
            taken = [name for name in names if name in scope_of]
            if taken:
                return f"{code.python_module}.{taken[0]} is taken by another compile", None
        # Each frame's globals as they are (later, as the package's install leaves them), and
        # what its install adds there: the modules it imports, Dynamo's builtins dict.
        added: dict[str, Any] = {}
        for code in entry.dynamo.codes:
            for alias, module_name in code.import_sources.items():
                added.setdefault(alias, importlib.import_module(module_name))
        for guards in dropped.values():
            for name in list(global_roots(guards)):
                if BUILTINS_ALIAS.match(name):
                    added.setdefault(name, builtins.__dict__)
        codes = {frame_key(code.python_code): code for code in entry.dynamo.codes}
        root = frame_key(fn.__code__)
        cells = closure_cells(fn)
        frames: dict[str, tuple[Mapping[str, Any], dict[str, str]]] = {}
        matched: dict[tuple[str, str], object] = {}
        for frame, guards in dropped.items():
            if frame not in codes:  # its guards would go nowhere
                return f"its guards name a frame it lacks ({frame})", None
            if frame == root:
                scope = ChainMap(frame_globals(fn), added)
            else:
                module = importlib.import_module(codes[frame].python_module)
                scope = ChainMap(module.__dict__, added)
            frames[frame] = (scope, guards)
            for name, expected in guards.items():
                # Checked now: a global, and a cell of the function's closure in its own frame.
                # One rooted at an argument is checked on each call (DroppedGuards).
                source = CALLS_AROUND.sub("", name)
                start = LOCAL_ROOT.match(source) or NAME_ROOT.match(source)
                in_cell = frame == root and start is not None and start.group(1) in cells
                if not GLOBAL_ROOT.match(source) and not in_cell:
                    continue
                try:
                    value = resolve(name, scope, cells if frame == root else {})
                    now = identity(value)
                except Exception as exc:
                    return f"{name} cannot be checked ({exc})", None
                if now != expected:
                    return f"{name} is another object ({now}, was {expected})", None
                matched[(frame, name)] = value
        try:
            restoring = DroppedGuards(frames, matched)
        except Unverifiable as exc:
            return f"its guards cannot be checked ({exc})", None
        return "", restoring if frames else None

    # -- the key ------------------------------------------------------------------------------

    def key_of(self, fn: Any, compile_call: str) -> tuple[str, dict[str, str]]:
        """Our key for ``fn``'s package compiled as ``compile_call`` asked, and its components
        (:func:`key.package_key`)."""
        return package_key(fn, compile_call, self.files)


class PackageSwitches(Protocol):
    """What :class:`DynamoPackages` asks of torch's switches (``torch_switches.Switches``)."""

    def serves_package(self, key: str) -> bool: ...

    def wrote(self, layer: str, key: str) -> None: ...

    def cleared(self, layer: str) -> None: ...


class _NoSwitches:
    """Serves everything, remembers nothing: where no switches are given (unit tests)."""

    def serves_package(self, key: str) -> bool:
        return True

    def wrote(self, layer: str, key: str) -> None:
        pass

    def cleared(self, layer: str) -> None:
        pass
