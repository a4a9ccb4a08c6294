"""torch.compile integration: Inductor's FX graph cache, the AOTAutograd cache, the autotune
caches and the CPU kernel binaries, all through compilecache.

Hooks (each checked on the installed torch, with a warning and no change if missing):

- **Remote caches.** Inductor's ``RemoteCache`` subclasses (``torch._inductor.remote_cache``)
  build their backend from the class attribute ``backend_override_cls`` when it is set (torch's
  own tests patch it). Where the program has not set one, it is set on ``RemoteFxGraphCache``
  (layer ``fx``), ``RemoteAOTAutogradCache`` (``aot``), ``RemoteAutotuneCache`` and
  ``RemoteBundledAutotuneCache`` (``autotune``) to a factory of :class:`StoreBackend`.
  compilecache sets none of torch's flags: torch's own questions "use the remote cache?" are
  answered "yes" for the store exactly where torch would cache on its own and the program said
  nothing of remote caches (:mod:`compilecache.frameworks.torch.switches` has the rules). So
  every switch of torch's means what it means without compilecache, and keys are the ones a
  plain torch process computes.
- **Kernels.** ``CppBuilder.build`` is wrapped (:mod:`compilecache.frameworks.torch.kernels`) so
  that CPU kernel binaries and the ISA probe builds travel as ``kernel`` entries: a new machine
  loads them instead of running the C++ compiler.
- **Key components.** ``codecache.compiled_fx_graph_hash`` and
  ``autograd_cache._get_debug_lines_for_cache_key`` are wrapped to remember the
  ``[hash] attr: value`` lines torch computes with each key (AOTAutograd computes them only with
  debug logging on; we ask for them anyway); they are stored with the entry (``components`` and
  ``extra["readable"]``) for miss explanations.
- **Single-flight.** FX and AOTAutograd lookups go through ``Cache.load_or_lead``: of several
  processes missing the same graph, one compiles it and the others wait for its entry. A lease
  ends with the graph's write, or when ``_compile_fx_inner`` / ``compile_fx`` returns without
  one (a bypass, an error); AOTAutograd writes its entry at the first backward, so its lease is
  kept up to ``AOT_WRITE_GRACE_S`` longer.
- **Miss explanations.** torch writes to a remote cache only after its lookup missed, so each FX
  or AOTAutograd ``put`` is a miss of ours: it is explained against the nearest stored entry of
  the same graph name (``explain.record_miss``) from the components above.
- **ISA probes.** ``VecISA._build_probe_env`` (optional): the child Pythons that dlopen the ISA
  probe libraries get ``COMPILECACHE_DISABLE=1``, so that ``compilecache run``'s bootstrap does
  not start compilecache in each of them (~0.15 s apiece, six per process on x86).

An AOTAutograd entry is only useful with its FX graphs: torch raises under
``strict_autograd_cache`` (and compiles the graph again otherwise) when they are missing. An
AOTAutograd hit is therefore served only when the FX graphs it names are in the store or in
torch's own directory (an FX entry evicted from a bounded store makes it a miss).

**torch's local hits are counted**. torch looks in its own directory first; a graph found there
never reaches compilecache. ``FxGraphCache._record_result`` and
``AOTAutogradCache._record_result`` (torch's own hit/miss bookkeeping, told whether a hit was
local) are wrapped: a local hit is a compilecache hit of the level ``torch-local``
(``torch.fx.local_hits``, ``torch.aot.local_hits``, ``level.torch-local.hits``), and the compile
time it saved is the stored entry's when the store holds that graph. torch's local caches stay
on: the kernel binaries and generated modules must be in its directory for torch to load them.

**Probe answers**: the vector-ISA probes and the compiler identity checks that torch
repeats on every start are answered from the store (:mod:`compilecache.frameworks.torch.probes`).

torch imports ``torch._inductor`` (and Dynamo, ~2.5 s) lazily, so nothing here is imported at
``install``: each hook is applied when its module is first imported (``_importhook``), which
always happens before the first compile looks anything up.

The backend never raises into torch: an exception from a remote ``put`` fails the user's compile
(torch's AOTAutograd write is outside any ``try``). Store errors are counted misses or failed writes (:class:`compilecache.runtime.cache.Cache`).

This module is the hook dispatch (:class:`Integration`: which hook each torch module gets as it
is imported, and how they are taken out); beside it: the store behind torch's remote-cache
interface (``remote``: :class:`StoreBackend`, its lookups and writes, torch's local hits),
torch's decision functions wrapped (``decisions``), torch's remote keys and payloads
(``payloads``) and the names of the modules hooked (``modules``).

Stored payloads are torch's own bytes: for ``fx`` and ``aot`` the pickled entry (torch's JSON
wrapper and its base64 are removed, the Cache compresses it), for ``autotune`` torch's JSON.
Store keys: ``torch/fx/<key>``, ``torch/aot/<key>``, ``torch/autotune/<sha256>``,
``torch/kernel/<sha256>``, ``torch/pch/<sha256>``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from compilecache import _importhook
from compilecache.config import Config
from compilecache.frameworks.torch import dynamo as torch_dynamo
from compilecache.frameworks.torch import extensions as torch_extensions
from compilecache.frameworks.torch import remote as torch_remote
from compilecache.frameworks.torch import switches as torch_switches
from compilecache.frameworks.torch import words as torch_words
from compilecache.frameworks.torch.decisions import DECISIONS, Decisions
from compilecache.frameworks.torch.dynamo import DynamoPackages
from compilecache.frameworks.torch.dynamo import key as torch_dynamo_key
from compilecache.frameworks.torch.extensions import ExtensionCache
from compilecache.frameworks.torch.headers import HeaderCache, HeaderHook
from compilecache.frameworks.torch.kernels import BuildHook, KernelCache
from compilecache.frameworks.torch.modules import (
    AOT_AUTOGRAD,
    AOT_RESULT,
    AUTOGRAD_CACHE,
    AUTOTUNE_CACHE,
    CODECACHE,
    CODEGEN_COMMON,
    COMPILE_FX,
    CPP_BUILDER,
    CPP_EXTENSION,
    CPU_VEC_ISA,
    GRAPH_COMPILE,
    INDUCTOR_UTILS,
    REMOTE_CACHE,
    TEST_CASE,
)
from compilecache.frameworks.torch.payloads import parse_debug_lines, store_key
from compilecache.frameworks.torch.probes import ProbeCache, ProbeHooks
from compilecache.frameworks.torch.remote import (
    LAYER_CLASS,
    REMOTE_CACHES,
    Accounting,
    BackendFactory,
    Pending,
    StoreBackend,
    StoreLayers,
)
from compilecache.frameworks.torch.sources import SourceKeyHooks
from compilecache.frameworks.torch.switches import AOT, FX, Switches
from compilecache.frameworks.torch.templates import TemplateHooks
from compilecache.host import framework_module as _private
from compilecache.patches import Patches
from compilecache.runtime import explain
from compilecache.runtime.cache import Cache

# What tests and tools import from here: the remote keys and torch's debug lines, the backend.
__all__ = [
    "BackendFactory",
    "Integration",
    "StoreBackend",
    "install",
    "parse_debug_lines",
    "store_key",
    "uninstall",
]

log = logging.getLogger("compilecache")

FRAMEWORK = torch_words.FRAMEWORK  # importing it registers the vocabulary


# How long an AOTAutograd lease outlives its compile, waiting for the first backward call.
AOT_WRITE_GRACE_S = 60.0


HOOKED_MODULES = (
    REMOTE_CACHE,
    INDUCTOR_UTILS,
    CPP_BUILDER,
    CODECACHE,
    AUTOGRAD_CACHE,
    AOT_RESULT,
    GRAPH_COMPILE,
    AOT_AUTOGRAD,
    AUTOTUNE_CACHE,
    TEST_CASE,
    CPU_VEC_ISA,
    COMPILE_FX,
    CODEGEN_COMMON,
    CPP_EXTENSION,
    *torch_dynamo.MODULES,
)


class Integration:
    """Everything one ``install`` put in place, and how to take it out again."""

    def __init__(self, cache: Cache, *, precompile: bool | None = None) -> None:
        self.cache = cache
        self.accounting = Accounting()
        self.pending = Pending()
        self.patches = Patches()
        self.switches = Switches()
        self.switches.owns = self.owns
        # Dynamo's packages from the store (COMPILECACHE_TORCH_PRECOMPILE: None is the default,
        # on where torch is a tested release), or None when switched off.
        self.dynamo = (
            DynamoPackages(
                cache,
                self.patches,
                self._dynamo_off,
                asked=precompile is True,
                switches=self.switches,
            )
            if precompile is not False
            else None
        )
        self.kernels = KernelCache(cache, on_built=self._kernel_built)
        self.kernels.off = self.off
        self.build_hook = BuildHook(self.kernels)
        probes = ProbeCache(cache)
        probes.off = self.off
        self.probe_hooks = ProbeHooks(probes)
        self.source_hooks = SourceKeyHooks(probes)
        self.template_hooks = TemplateHooks(probes)
        headers = HeaderCache(probes)
        self.header_hook = HeaderHook(headers)
        self.kernels.preprocess = headers.preprocess
        self.kernels.before_compile = headers.ensure_for
        self.extensions = ExtensionCache(cache)
        self.extensions.off = self.off
        # The store behind torch's remote-cache interface (remote.py).
        self.remote = StoreLayers(cache, self.switches, self.accounting, self.pending)
        # torch's decision functions, wrapped and rebound (decisions.py).
        self.decisions = Decisions(
            self.switches,
            self.patches,
            self.note_off,
            self.dynamo.backends.bundling if self.dynamo is not None else None,
        )
        self.applied: set[str] = set()
        self.lock = threading.RLock()
        self.notes = explain.SettingNotes(cache, FRAMEWORK)

    # --- torch's switches ---------------------------------------------------------------------

    def off(self) -> str:
        """Why torch's switches turn every torch layer of compilecache off now (noted once per
        reason for explain and doctor), or ``""``."""
        reason = self.switches.off()
        if reason:
            self.note_off(reason)
        return reason

    def note_off(self, reason: str) -> None:
        """Say once per process and reason that a torch switch turned layers off (a record
        ``explain`` lists, an event ``doctor`` and ``run`` report)."""
        self.notes.note(reason)

    def owns(self, layer: str) -> bool:
        """Whether torch builds compilecache's backend for ``layer``'s remote cache now (the
        program may have set a ``backend_override_cls`` of its own, before or after enable)."""
        remote = sys.modules.get(REMOTE_CACHE)
        cls = getattr(remote, LAYER_CLASS[layer], None)
        return isinstance(getattr(cls, "backend_override_cls", None), BackendFactory)

    # --- hooks, applied as their modules are imported -----------------------------------------

    def apply(self, module_name: str) -> None:
        """Apply the hooks that live in ``module_name`` (already imported). Never raises."""
        with self.lock:
            if module_name in self.applied:
                return
            try:
                hook = _APPLY.get(module_name)
                if hook is not None:
                    hook(self, _private(module_name))
                self.decisions.rebind()
                self.applied.add(module_name)
            except Exception as exc:
                torch = sys.modules.get("torch")
                version = getattr(torch, "__version__", "?")
                self.cache.warn_once(
                    f"torch:hook:{module_name}",
                    f"torch {version}: could not hook {module_name} ({exc}); that part of "
                    "torch.compile is not cached",
                )

    def _hook_cpp_builder(self, module: Any) -> None:
        # Warns by itself when this torch lacks what it needs (FX and AOT entries still work).
        self.build_hook.install()
        self.probe_hooks.install_compiler(module)

    def _hook_cpp_extension(self, module: Any) -> None:
        # load / load_inline: the extension's build directory through the store.
        self.patches.wrap(module, torch_extensions.FUNCTION, self.extensions.wrap)

    def _hook_remote_cache(self, module: Any) -> None:
        missing = [
            name
            for name in REMOTE_CACHES
            if not hasattr(getattr(module, name, None), "backend_override_cls")
        ]
        if missing:
            raise AttributeError(f"no backend_override_cls on {', '.join(missing)}")
        for name, layer in REMOTE_CACHES.items():
            cls = getattr(module, name)
            if cls.backend_override_cls is not None:
                # The program's own backend (torch's tests patch it so): kept, and compilecache
                # steps aside for that layer (Switches.layer_off says so).
                log.info("compilecache: %s keeps the program's backend", name)
                continue
            self.patches.replace(cls, "backend_override_cls", BackendFactory(layer, name))

    def _remembering(self, original: Any) -> Any:
        pending = self.pending

        # Wraps compiled_fx_graph_hash or autograd_cache_key: both return (key, debug lines).
        def cache_key(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                key, lines = result
                pending.remember(str(key), list(lines))
            except Exception as exc:  # a changed signature must not break the compile
                log.debug("compilecache: torch key components not recorded: %s", exc)
            return result

        return cache_key

    def _debug_lines(self, original: Any) -> Any:
        pending = self.pending

        def _get_debug_lines_for_cache_key(pickler: Any, details: Any, key: str) -> Any:
            lines = original(pickler, details, key)
            try:
                computed = lines or pickler.debug_lines(details)
                pending.remember(str(key), list(computed))
            except Exception as exc:
                log.debug("compilecache: AOTAutograd key components not recorded: %s", exc)
            return lines

        return _get_debug_lines_for_cache_key

    def _hook_dynamo(self, module: Any) -> None:
        if self.dynamo is not None:
            self.dynamo.apply(module.__name__, module)

    def _dynamo_off(self) -> str:
        """Why Dynamo's packages are neither served nor written now, or ``""``: torch's
        switches that turn every layer off, and AOTAutograd's (a package's backend is its
        AOTAutograd entry)."""
        return self.off() or self.switches.layer_off(AOT)

    def _hook_codecache(self, module: Any) -> None:
        self.patches.wrap(module, "compiled_fx_graph_hash", self._remembering)
        self._count_local_hits(getattr(module, "FxGraphCache", None), FX)
        self._hook_clear(getattr(module, "FxGraphCache", None), FX)
        # torch_key() and triton_key() from the store (sources.py).
        self.source_hooks.install(module)
        # The precompiled header's preprocessing answered, its .gch from the store
        # (headers.py).
        self.header_hook.install(module)
        if hasattr(module, "_worker_compile_cpp"):
            self.patches.wrap(module, "_worker_compile_cpp", self._compiling_cpp)

    def _compiling_cpp(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch builds a kernel's binaries only where its own directory lacks them: those it
        found there also go to the store (on the background thread), so that a new machine
        is as warm as this one."""
        kernels = self.kernels
        background = self.cache.background

        @functools.wraps(original)
        def _worker_compile_cpp(lock_path: Any, cpp_builders: Any, *args: Any, **kw: Any) -> Any:
            result = original(lock_path, cpp_builders, *args, **kw)
            with contextlib.suppress(Exception):  # a convenience: never in torch's way
                background.add(functools.partial(kernels.built_before, list(cpp_builders)))
            return result

        return _worker_compile_cpp

    def _hook_clear(self, cls: Any, layer: str) -> None:
        """torch's ``clear()`` empties its directory for a cold compile: after it, this process
        is served only the ``layer`` entries it writes again (the store keeps them for others).
        """
        original = getattr(cls, "__dict__", {}).get("clear")
        if not isinstance(original, staticmethod):
            log.debug("compilecache: no %s.clear; a clear() keeps serving the store", layer)
            return
        clear = original.__func__
        switches = self.switches

        @functools.wraps(clear)
        def cleared() -> Any:
            result = clear()
            switches.cleared(layer)
            return result

        self.patches.replace(cls, "clear", staticmethod(cleared), label=f"clear.{layer}")

    def _count_local_hits(self, cls: Any, layer: str) -> None:
        """Wrap ``cls._record_result`` (torch's hit/miss bookkeeping of a lookup, told whether
        a hit came from its local directory) to count local hits as compilecache hits of the
        ``torch-local`` level (see the module docstring). An optimisation of the counts only:
        a torch without it is left alone."""
        original = getattr(cls, "__dict__", {}).get("_record_result")
        if not isinstance(original, classmethod):
            log.debug("compilecache: no %s._record_result; torch's local hits not counted", layer)
            return
        func = original.__func__
        integration = self

        def record(klass: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                if kwargs.get("local_hit", args[0] if args else False):
                    integration.remote.local_hit(layer, str(key))
            except Exception as exc:  # counting must never break a lookup
                log.debug("compilecache: torch local hit not counted: %s", exc)
            return func(klass, key, *args, **kwargs)

        record.__wrapped__ = func  # type: ignore[attr-defined]
        self.patches.replace(
            cls, "_record_result", classmethod(record), label=f"local_hits.{cls.__name__}"
        )

    def _hook_autograd_cache(self, module: Any) -> None:
        if hasattr(module, "_get_debug_lines_for_cache_key"):
            # torch computes the AOT debug lines only with debug logging on; compute them anyway
            # (~30 ms per graph) while the graph is still sanitised for hashing.
            self.patches.wrap(module, "_get_debug_lines_for_cache_key", self._debug_lines)
        else:
            self.patches.wrap(module, "autograd_cache_key", self._remembering)
        cls = getattr(module, "AOTAutogradCache", None)
        self._count_local_hits(cls, AOT)
        self._hook_clear(cls, AOT)
        self._hook_aot_remote_cache(cls)
        self._hook_dynamo(module)

    def _hook_aot_remote_cache(self, cls: Any) -> None:
        """``AOTAutogradCache.get_remote_cache`` is ``functools.cache``'d: the first backend
        built would serve for the life of the process. Rebuilt instead whenever the backend
        class or the program's choice of a remote cache changed (a backend set after enable)."""
        original = getattr(cls, "__dict__", {}).get("get_remote_cache")
        if not isinstance(original, staticmethod):
            log.debug("compilecache: no AOTAutogradCache.get_remote_cache; left alone")
            return
        cached = original.__func__
        build = getattr(cached, "__wrapped__", cached)
        switches = self.switches
        lock = threading.Lock()
        memo: dict[Any, Any] = {}

        def get_remote_cache() -> Any:
            remote = sys.modules.get(REMOTE_CACHE)
            backend = getattr(getattr(remote, LAYER_CLASS[AOT], None), "backend_override_cls", None)
            state = (id(backend), switches.chosen(AOT))
            with lock:
                if state in memo:
                    return memo[state]
            made = build()
            with lock:
                memo.clear()
                memo[state] = made
            return made

        def cache_clear() -> None:
            with lock:
                memo.clear()
            getattr(cached, "cache_clear", lambda: None)()

        get_remote_cache.__wrapped__ = cached  # type: ignore[attr-defined]
        get_remote_cache.cache_clear = cache_clear  # type: ignore[attr-defined]
        cache_clear()  # a None (or a Redis cache) made before compilecache was installed
        self.patches.replace(
            cls, "get_remote_cache", staticmethod(get_remote_cache), label="aot.get_remote_cache"
        )

    def _hook_codegen_common(self, module: Any) -> None:
        # Compiled kernel templates from the store (templates.py).
        self.template_hooks.install(module)

    def _hook_cpu_vec_isa(self, module: Any) -> None:
        # The probe verdicts come from the store (probes.py); on a miss the probe runs.
        self.probe_hooks.install_isa(module)
        self._hook_probe_env(module)

    def _hook_probe_env(self, module: Any) -> None:
        """Inductor checks each vector ISA by loading a probe library in a child Python (six
        of them per process on x86). Under ``compilecache run`` every Python child enables
        compilecache at start-up, which costs more than the probe itself; the probe has nothing
        to cache, so its environment says ``COMPILECACHE_DISABLE=1``. An optimisation only: a
        torch without this hook is left alone, silently."""
        cls = getattr(module, "VecISA", None)
        original = getattr(cls, "__dict__", {}).get("_build_probe_env")
        if cls is None or not isinstance(original, staticmethod):
            log.debug("compilecache: no VecISA._build_probe_env in this torch; probes left alone")
            return
        build_env = original.__func__

        def probe_env() -> Any:
            env = build_env()
            if isinstance(env, dict):
                env["COMPILECACHE_DISABLE"] = "1"
            return env

        probe_env.__wrapped__ = build_env  # type: ignore[attr-defined]
        self.patches.replace(cls, "_build_probe_env", staticmethod(probe_env), label="probes.env")

    def _hook_compile_fx(self, module: Any) -> None:
        """End this thread's leases when an Inductor compile returns, written or not.

        A lookup that missed leads its key until the entry is written (``put``). torch skips the
        write for graphs it cannot cache (a bypass), and a compile can fail: without this, such
        a lease would be renewed until the process ends and other processes would wait on it.
        ``_compile_fx_inner`` is one FX graph's compile (forward, or a lazily compiled backward);
        ``compile_fx``, Inductor's entry point for one Dynamo graph, also encloses the
        AOTAutograd lookup. An AOTAutograd entry is written at the first backward call, after
        both return: its lease is kept for AOT_WRITE_GRACE_S more (single-flight then marks it
        unwritten, and the others trace it themselves and find the FX graphs stored).
        An optimisation only: without these functions leases end with their writes.
        """
        wrapped = False
        for name in ("compile_fx", "_compile_fx_inner"):
            if callable(getattr(module, name, None)):
                self.patches.wrap(module, name, self._ending_leases, label=f"leases.{name}")
                wrapped = True
        if not wrapped:
            log.debug("compilecache: no compile_fx in this torch; leases end with their writes")

    def _ending_leases(self, original: Any) -> Any:
        cache = self.cache
        local = threading.local()

        # Wraps compile_fx and _compile_fx_inner.
        @functools.wraps(original)
        def compile_fx(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                local.depth = depth
                if depth == 0:  # compile_fx calls itself for some graphs
                    try:
                        cache.finish_thread_leads(_written_later, AOT_WRITE_GRACE_S)
                    except Exception as exc:  # never raise into torch; leases expire anyway
                        log.debug("compilecache: could not end torch leases: %s", exc)

        return compile_fx

    def _kernel_built(self, seconds: float) -> None:
        """A kernel binary took ``seconds`` to build: its own entry's time, not also its FX
        graph's or its Dynamo package's."""
        self.accounting.kernel_built(seconds)
        if self.dynamo is not None:
            self.dynamo.kernel_built(seconds)

    def uninstall(self) -> None:
        with self.lock:
            for name in HOOKED_MODULES:
                _importhook.cancel(name)
            self.build_hook.uninstall()
            self.header_hook.uninstall()
            self.probe_hooks.uninstall()
            self.source_hooks.uninstall()
            self.template_hooks.uninstall()
            self.patches.undo()
            self.decisions.wrapped.clear()
            autograd = sys.modules.get(AUTOGRAD_CACHE)
            get_remote = getattr(
                getattr(autograd, "AOTAutogradCache", None), "get_remote_cache", None
            )
            if get_remote is not None and hasattr(get_remote, "cache_clear"):
                get_remote.cache_clear()  # a remote cache built with compilecache's backend
            self.applied.clear()

    def hook_status(self) -> dict[str, bool]:
        """Which hooks are in place now (imports the hooked modules, which is slow)."""
        for name in HOOKED_MODULES:
            with contextlib.suppress(ImportError):
                _private(name)
        status: dict[str, bool] = {}
        remote = _private(REMOTE_CACHE)
        for name in REMOTE_CACHES:
            override = getattr(getattr(remote, name, None), "backend_override_cls", None)
            status[f"remote.{name}"] = isinstance(override, BackendFactory)
        for names, definer, _ in DECISIONS:
            if names[0] == "fresh_cache" and "fresh_cache" in self.patches.live():
                continue  # marked inside the function itself: its own label below
            if self.decisions.wrapped.get(names[0], (None, None))[0] is not None:
                module = sys.modules.get(definer)
                status[f"decision.{names[0]}"] = self.patches.patched(module, names[0])
        status["kernel.CppBuilder.build"] = self.build_hook.live
        status["headers._precompile_header"] = self.header_hook.live
        status.update(self.patches.live())
        status.update(self.probe_hooks.live())
        status.update(self.source_hooks.live())
        status.update(self.template_hooks.live())
        return status


_APPLY: dict[str, Callable[[Integration, Any], None]] = {
    REMOTE_CACHE: Integration._hook_remote_cache,
    CPP_BUILDER: Integration._hook_cpp_builder,
    CODECACHE: Integration._hook_codecache,
    AUTOGRAD_CACHE: Integration._hook_autograd_cache,
    CPU_VEC_ISA: Integration._hook_cpu_vec_isa,
    COMPILE_FX: Integration._hook_compile_fx,
    CODEGEN_COMMON: Integration._hook_codegen_common,
    CPP_EXTENSION: Integration._hook_cpp_extension,
    **{name: Integration._hook_dynamo for name in torch_dynamo.MODULES},
}


def _written_later(key: str) -> bool:
    """AOTAutograd entries are written at the first backward, after their compile returned, and
    Dynamo's packages once their AOTAutograd entries are."""
    return key.startswith((f"{FRAMEWORK}/aot/", torch_dynamo_key.PREFIX))


_installed: Integration | None = None


def install(cache: Cache, cfg: Config) -> bool:
    """Route torch.compile's caches through ``cache``; hooks apply as torch's modules load.
    ``cfg``, the session's configuration, says whether Dynamo's packages are kept too."""
    global _installed
    torch = _private("torch")
    if not hasattr(torch, "compile"):
        cache.warn_once("torch:hook", f"torch {torch.__version__} has no torch.compile; left alone")
        return False
    if _installed is not None:
        uninstall()
    integration = Integration(cache, precompile=None if cfg is None else cfg.torch_precompile)
    _installed = integration
    torch_switches.activate(integration.switches)
    torch_remote.activate(integration.remote)
    for name in HOOKED_MODULES:
        _importhook.when_imported(name, _applier(integration, name))
    log.info("compilecache: torch %s routed through %s", torch.__version__, cache.store.url)
    return True


def _applier(integration: Integration, name: str) -> Callable[[Any], None]:
    def apply(_module: Any) -> None:
        if _installed is integration:
            integration.apply(name)

    return apply


def uninstall() -> None:
    """Restore torch's classes and functions."""
    global _installed
    if _installed is None:
        return
    integration, _installed = _installed, None
    torch_switches.activate(None)
    torch_remote.activate(None)
    integration.uninstall()


def active() -> Integration | None:
    return _installed


def hook_status() -> dict[str, bool]:
    """Which hooks are live now; imports torch's compiler modules. Empty when not installed."""
    integration = _installed
    return integration.hook_status() if integration is not None else {}
