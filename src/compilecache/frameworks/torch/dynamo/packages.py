"""Dynamo's packages in the store: what is looked up, served, checked and written, and the hooks
of torch.compile's call, of Dynamo's package and of its install (the face of this package,
``compilecache.frameworks.torch.dynamo``, says what a package is and when it is served).
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
from compilecache.frameworks.torch.dynamo.backends import AotBackends, record_portable
from compilecache.frameworks.torch.dynamo.guard_hooks import GuardHooks
from compilecache.frameworks.torch.dynamo.guards import (
    BUILTINS_ALIAS,
    CALLS_AROUND,
    GLOBAL_ROOT,
    LOCAL_ROOT,
    NAME_ROOT,
    Dropped,
    DroppedGuards,
    Unverifiable,
    Values,
    closure_cells,
    frame_key,
    global_roots,
    identity,
    merge_dropped,
    merge_values,
    mixed_orders,
    own_source,
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
from compilecache.frameworks.torch.dynamo.mode import (
    AUTOGRAD_CACHE,
    CONTEXT,
    DYNAMO,
    DYNAMO_CONFIG,
    EVAL_FRAME,
    GUARDS,
    OURS,
    OUTPUT,
    PACKAGE,
    STANDALONE,
    TESTED,
    mode_is_ours,
)
from compilecache.frameworks.torch.dynamo.repairs import (
    advance_unique_ids,
    frame_globals,
    install_root_globals,
    property_accessor,
    unprovided_global,
)
from compilecache.frameworks.torch.dynamo.unguarded import UnguardedReads
from compilecache.host import cpu_target
from compilecache.patches import Patches
from compilecache.runtime import explain
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

# 2: with the values each frame's guards were built from (older packages are not served).
_FORMAT = 2
# What a package's install looks up, by key prefix: read together with the package (its
# AOTAutograd entries, FX graphs, kernel binaries and the compiler probes they are checked
# against; never the precompiled header, which only a compile reads), at most MAX_READS of them.
READ_WITH = tuple(f"torch/{layer}/" for layer in ("aot", "fx", "kernel", "probe", "autotune"))
MAX_READS = 512


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
        self.guard_hooks = GuardHooks(cache, patches, self.local, lambda: self.enabled)
        self.unguarded = UnguardedReads(self.guard_hooks)
        self.backends = AotBackends(patches, lambda: self.enabled)
        # The guards dropped per package: a frame's key (frame_key) -> source -> identity().
        self.dropped: weakref.WeakKeyDictionary[Any, Dropped] = weakref.WeakKeyDictionary()
        self.unverifiable: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # Why the stored package of a key was not used here (said when it is written again).
        self.stale: dict[str, str] = {}
        # The dropped guards of the packages loaded here, by key: a recompile (a new shape)
        # writes the package again, with its loaded frames, whose guards must come along.
        self.loaded: dict[str, Dropped] = {}
        # The values each package's frames' guards were built from (guard_hooks), and those
        # of the packages loaded here, by key (a recompile writes them again with its own).
        self.values: weakref.WeakKeyDictionary[Any, Values] = weakref.WeakKeyDictionary()
        self.loaded_values: dict[str, Values] = {}
        # The modules defining what each package's guards know by name (guard_hooks), and the
        # sources of the packages loaded here, by key: checked as the traced modules are.
        self.guard_modules: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self.loaded_sources: dict[str, dict[str, str]] = {}
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
        # Whether the dropped guards are seen, and which of the reads Dynamo leaves unguarded
        # (a missing key, the environment read by the standard library) are guarded: without
        # all of them no package is written.
        self.watching = False
        self.reads_guarded: set[str] = set()
        # Whether caching_precompile was turned on by us (see enabled).
        self.hooked = False
        # What each package's frames took to compile (tracing and backends): what a hit saves.
        self.compile_s: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        # Recent kernel builds, (when each ended, how long it took): those within a frame's
        # compile are not its package's time.
        self._kernel_builds: deque[tuple[float, float]] = deque(maxlen=1000)
        # Where the record of lookups stood at each key's first lookup here: those after it,
        # up to the package's write, are what its install reads (stored with it as "reads").
        self.marks: dict[str, int] = {}

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
            self.guard_hooks.apply(module)
            self.watching = True
        elif name in self.unguarded.hooks:
            self.unguarded.hooks[name](module)
            self.reads_guarded.add(name)
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
            self.backends.apply(module)
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
        if getattr(config, "skip_nnmodule_hook_guards", False) is True:
            # torch's default leaves a module's hooks unguarded ("unsafe", its config says):
            # a trace made without a hook would be served where a submodule has one.
            self.patches.replace(
                config, "skip_nnmodule_hook_guards", False, label="dynamo.hook_guards"
            )
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

    def _installing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A loaded package's guard managers are built in its ``install``: the check of its
        dropped guards (set by :meth:`_load`) goes into each, and no further. An install that
        fails leaves the package fresh, so Dynamo traces (torch's own fallback catches only a
        RuntimeError, and then raises on the package it left initialised)."""

        def install(package: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.enabled:  # the program's own mode: torch's own install
                return original(package, *args, **kwargs)
            try:
                with self.guard_hooks.quiet():
                    installed = original(package, *args, **kwargs)
                stale = getattr(self.local, "stale", "")
                if stale:  # a value its guards were built from changed since it was traced
                    self._install_stale(package, stale)
                    return None
                install_root_globals(package)
                with self.lock:
                    self.installed.append(package)
                return installed
            except Exception as exc:
                stale = getattr(self.local, "stale", "")
                if stale:  # it failed on a value its guards read, missing here
                    self._install_stale(package, stale)
                else:
                    self._install_failed(package, exc)
                return None
            finally:
                self.local.restoring = None
                self.local.expected, self.local.stale = None, ""

        return install

    def _install_stale(self, package: Any, why: str) -> None:
        """A loaded package whose guards were built, here, from other values than where it was
        traced: taken out again, and Dynamo traces (counted as stale, not as a hit)."""
        fn = self._uninstall(package)
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.hits", -1.0)
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.stale")
        log.info("compilecache: Dynamo package of %s not used: %s", fn.__qualname__, why)
        with contextlib.suppress(Exception):
            key, _ = self.key_of(fn, str(self.compiles[package]))
            self._forget_loaded(key, why)

    def _uninstall(self, package: Any) -> Any:
        """Leave ``package`` fresh (Dynamo then traces its frames); its function."""
        fn = package._innermost_fn
        # torch's uninstall takes out the globals the install added and the entries of the
        # function's own code, not those it loaded onto the code of a resume function (after a
        # graph break), which would then call a compiled graph no longer there.
        codes = list(getattr(package, "_codes", {}).items())
        with contextlib.suppress(Exception):
            package.uninstall()
        eval_frame = importlib.import_module("torch._C._dynamo.eval_frame")
        for code, entry in codes:
            try:
                eval_frame._reset_precompile_entries(self._installed_code(code, entry))
            except Exception as exc:  # a code that was never installed onto: nothing to take out
                log.debug("compilecache: could not reset %r: %s", code, exc)
        package.__init__(None)
        package.initialize(fn, None, ignore_inlined_sources=False)
        return fn

    def _install_failed(self, package: Any, exc: Exception) -> None:
        fn = self._uninstall(package)
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.errors")
        self.cache.warn_once(
            "torch:dynamo:install",
            f"a Dynamo package from the cache could not be installed ({_install_reason(exc)}); "
            "Dynamo traces and compiles its frames as without the cache",
        )
        with contextlib.suppress(Exception):
            key, _ = self.key_of(fn, str(self.compiles[package]))
            self._forget_loaded(key, f"torch could not install it ({type(exc).__name__})")

    def _forget_loaded(self, key: str, why: str) -> None:
        """A loaded package left fresh: what it was checked against is not part of the package
        its function's trace makes next (which holds only that trace's frames)."""
        with self.lock:
            self.stale[key] = why
            self.loaded.pop(key, None)
            self.loaded_values.pop(key, None)
            self.loaded_sources.pop(key, None)

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
            values: Values = getattr(self.local, "values", None) or {}
            modules: set[str] = getattr(self.local, "modules", None) or set()
            self.local.dropped, self.local.frames, self.local.problem = {}, {}, ""
            self.local.values, self.local.modules = {}, set()
            fn = package._innermost_fn
            compile_call = self.compiles.get(package)
            if compile_call is None:
                # Another backend than Inductor (or a package not made by torch.compile's
                # lookup): torch's own mode would serve it to any backend; we keep none.
                return
            try:
                key = self.key_of(fn, compile_call)
            except Unverifiable as exc:  # counted where its lookup found no key
                log.info("compilecache: Dynamo package of %s not stored: %s", fn.__qualname__, exc)
                return
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
                merge_values(self.values.setdefault(package, {}), values)
                self.guard_modules.setdefault(package, set()).update(modules)
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
        handed = False
        try:
            handed = self._write_package(package, backends, fn, key, components)
        finally:
            if not handed:  # a handed write ends the lease once written
                self.cache.finish_lead(key)

    def _write_package(
        self,
        package: Any,
        backends: dict[str, Any],
        fn: Any,
        key: str,
        components: dict[str, str],
    ) -> bool:
        """Check ``package`` and make its entry here (torch's objects are this thread's), then
        hand the entry's encoding and write to the background thread; whether it was handed."""
        problem = self.unverifiable.get(package, "")
        if not self.watching:
            problem = "the guards Dynamo drops could not be watched"
        elif self.reads_guarded != set(self.unguarded.hooks):
            problem = "what Dynamo reads without a guard could not be guarded"
        elif getattr(sys.modules.get(DYNAMO_CONFIG), "skip_nnmodule_hook_guards", False):
            problem = "its modules' hooks are not guarded (skip_nnmodule_hook_guards)"
        problem = problem or unprovided_global(package) or self._unloadable(package)
        if problem:
            self._not_stored(fn, problem)
            return False
        dynamo = package.cache_entry()
        modules = {code.python_module for code in dynamo.codes}
        modules |= {source.module for source in dynamo.source_info.inlined_sources}
        modules |= set(self.loaded_sources.get(key, {}))
        try:
            sources = {name: source_digest(name, self.files) for name in sorted(modules)}
        except Exception as exc:
            self._not_stored(fn, str(exc))
            return False
        for name in sorted(self.guard_modules.get(package, set()) - modules):
            if own_source(name):
                with contextlib.suppress(Exception):  # no source file: known by name only
                    sources[name] = source_digest(name, self.files)
        guards = {scope: dict(named) for scope, named in self.loaded.get(key, {}).items()}
        problem = merge_dropped(guards, self.dropped.get(package, {}))
        values: Values = {}
        merge_values(values, self.loaded_values.get(key, {}))
        merge_values(values, self.values.get(package, {}))
        problem = problem or mixed_orders(values)
        if problem:
            # A frame loaded for one object and a frame traced for another: one entry cannot
            # say which is which.
            self._not_stored(fn, problem)
            return False
        entry = self.package_module.PrecompileCacheEntry(dynamo=dynamo, backends=backends)
        aot_keys = self.backends.keys_of(backends)
        payload = pickle.dumps(
            {
                "format": _FORMAT,
                "entry": entry,
                "sources": sources,
                "guards": guards,
                "values": values,
                "aot_keys": aot_keys,
                "reads": self._reads(key),
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
        with self.lock:
            stale = self.stale.pop(key, "")
        why = f"Dynamo's stored package was not used ({stale}); traced again" if stale else ""
        store = functools.partial(self._store_package, header, payload, components, why)
        self.cache.save_later(key, store, awaited=True)
        return True

    def _store_package(
        self, header: EntryHeader, payload: bytes, components: dict[str, str], why: str
    ) -> None:
        """Write a package's entry made by :meth:`_write_package` (on the background thread)
        and explain the miss it follows. Never raises."""
        try:
            stored = self.cache.save(header, payload, any_time=True)
            if stored:
                self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.writes")
                self.switches.wrote(LAYER, header.key)
            # Written after a lookup that found nothing usable: a miss, explained as torch's
            # graphs are (the nearest stored package and what differs), or by why its own was
            # not used.
            explain.record_miss(
                self.cache,
                framework=FRAMEWORK,
                name=header.name,
                key=header.key,
                components=components,
                readable=readable(components),
                prefix=f"{PREFIX}{header.name}-",
                # The frames' own compile time: the function's row counts it, as its hits save it.
                compile_time_s=header.compile_time_s,
                stored=stored,
                reason="" if stored else self.cache.skip_reason(header.compile_time_s, header.key),
                background=True,
                why=why,
            )
        except Exception as exc:
            self.cache.stats.add("errors", framework=FRAMEWORK)
            self.cache.warn_once("torch:dynamo:write", f"Dynamo package not stored: {exc}")

    def _reads(self, key: str) -> list[str]:
        """The store keys looked up since ``key``'s package was first looked up here (its
        frames' graphs, kernels and probes: what its install reads in another process), read
        together with it there. Keys of another package compiled meanwhile may come along:
        a read of more than is needed, never a wrong one (each is checked when it is used)."""
        prefetcher = self.cache.prefetcher
        mark = self.marks.get(key)
        if prefetcher is None or mark is None:
            return []
        reads = [k for k in prefetcher.lookups_since(mark) if k.startswith(READ_WITH)]
        return reads[:MAX_READS]

    def _installed_code(self, code: Any, entry: Any) -> Any:
        """The code object a package's ``entry`` for ``code`` is installed onto in this process:
        for a frame with its own source (a resume function after a graph break, an inlined
        method), the code torch finds from that source, else ``code`` itself."""
        return self.package_module._lookup_code(entry) if entry.code_source else code

    def _not_stored(self, fn: Any, problem: str) -> None:
        self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.unverifiable")
        log.info("compilecache: Dynamo package of %s not stored: %s", fn.__qualname__, problem)

    def _unloadable(self, package: Any) -> str:
        """Why torch could not install ``package`` in another process (``""`` where it could):
        each frame's guards are built again from their saved state, as its install does (a
        decorated function torch saved as missing: GPT-2's guards on ``L['func']``)."""
        module = self.package_module
        # What the guard hooks note meanwhile is not this package's compile: put back after.
        noted = ("dropped", "frames", "problem", "values", "building", "modules")
        saved = {name: getattr(self.local, name, None) for name in noted}
        try:
            with self.guard_hooks.quiet():
                for code, entry in list(package._codes.items()):
                    target = self._installed_code(code, entry)
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
        try:
            key, _ = self.key_of(inner, compile_call)
        except Unverifiable as exc:  # no source file to key it by: traced, never stored
            self.cache.stats.add(f"{FRAMEWORK}.{LAYER}.unverifiable")
            log.info("compilecache: no Dynamo package for %s: %s", inner.__qualname__, exc)
            return None
        prefetcher = self.cache.prefetcher
        if prefetcher is not None:
            with self.lock:
                self.marks.setdefault(key, prefetcher.mark())
        self.cache.await_write(key)  # this process's own package of it, being written
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
        if prefetcher is not None:  # what the install looks up next: one read, not one each
            prefetcher.read_together(stored.get("reads", []))
        # torch installs the package next, in this thread: its guard managers get the check,
        # and the values they are built from are compared with those recorded.
        self.local.restoring = restoring
        self.local.expected, self.local.stale = stored["values"], ""
        with self.lock:
            self.loaded[key] = stored["guards"]
            self.loaded_values[key] = stored["values"]
            self.loaded_sources[key] = stored["sources"]
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
