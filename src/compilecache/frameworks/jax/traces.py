"""Warm starts that do not trace: a jitted function's first call in a new process runs the
executable a guarded trace entry names, without running the program's Python to trace it, to
lower it to StableHLO or to hash the module.

Where it hooks: ``jax.jit(f)`` builds a C++ ``pjit`` object whose Python ``cache_miss`` calls
``pjit._infer_params`` (tracing) and then ``pjit._run_python_pjit`` (lowering, compiling or the
persistent cache, running), and hands JAX's C++ fast path what it needs for later calls. Both are
looked up at call time, so both are wrapped here, and only a call from ``cache_miss`` itself, at
the top level (no trace under way, no tracer among the arguments), is considered:

- **Record** (no usable entry): the guards are walked before the trace (:mod:`.guards`: the
  function, its static arguments, its arguments' pytree nodes, the jit's options, JAX's whole
  configuration), the trace runs under a profiler that lists the Python code it ran, the guards
  are walked again after it (a trace that changed what it read is not kept), and the compile that
  follows is watched for JAX's cache key and the compile options it was built with. The entry
  holds the executable's calling convention (JAX's own ``UnloadedMeshExecutable`` without the
  executable, which stays JAX's entry under JAX's key), the output tree, the key, and the hashes
  of every key component but the computation, as this host builds them.
- **Serve**: the signature (the function's name, the avals, shardings and structure of its
  arguments, the jit's options, JAX's configuration, the versions) finds the entry, whose variants
  are filed under the digest of their guards; the guards walked now pick one or none. The compile
  options are built again here and the other key components hashed: where they match the
  recorded ones, JAX's key for this host is the recorded key, and the executable is read through
  JAX's own cache lookup (counted, read ahead, checked for this host like any other). Then it runs
  with JAX's own argument checks, and ``cache_miss`` hands the C++ fast path the same data as
  after a trace.

Whatever cannot be shown to trace the same is traced, counted and explained: a refused guard, a
program function the guards do not cover that ran during the trace, a denied builtin called by the
program, effects, constants, host callbacks, meshes, PGLE, JAX's own switches (a cache turned off
or checking its contents, ``jax_log_compiles`` and ``jax_explain_cache_misses``, which ask to see
the trace), a profiler of the program's own.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import pickle
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from compilecache.entry import EntryHeader
from compilecache.frameworks.jax import bindings
from compilecache.frameworks.jax import guards as jax_guards
from compilecache.frameworks.jax import xla as jax_xla
from compilecache.frameworks.jax.adapter import FRAMEWORK, JaxCacheAdapter, store_key
from compilecache.frameworks.jax.key import (
    Recorder,
    compression_name,
    key_steps,
    readable_components,
)
from compilecache.frameworks.jax.passes import PASSES
from compilecache.host import framework_module as _private
from compilecache.host import jax_versions
from compilecache.patches import Patches
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

LAYER = "trace"
PREFIX = f"{FRAMEWORK}/{LAYER}/"
# Guard variants kept per signature (a program run with a few settings by turns keeps each).
VARIANTS = 4
FORMAT = 5
# The platforms whose executables are served without their trace: the ones tested (a GPU
# executable may call kernels that its lowering readies, as LAPACK's are on the CPU).
SERVED_PLATFORMS = ("cpu",)
# The JAX releases traces are served on by default (COMPILECACHE_JAX_PRECOMPILE unset; =1 on
# another serves them and says so once).
TESTED_RELEASES = ("0.10.",)
# JAX's options that cannot change a trace, its lowering or its executable: left out of the
# configuration guard (the cache's own location and thresholds, logging).
_IRRELEVANT_OPTIONS = frozenset(
    {
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
        "jax_compilation_cache_max_size",
        "jax_persistent_cache_enable_xla_caches",
        "jax_logging_level",
        "jax_debug_log_modules",
        "jax_log_compiles",
        "jax_explain_cache_misses",
        "jax_log_checkpoint_residuals",
        "jax_traceback_filtering",
        "jax_include_full_tracebacks_in_locations",
        "jax_traceback_in_locations_limit",
        "jax_raise_persistent_cache_errors",
    }
)
# Options under which a trace is never served: the program asks to see tracing and compiles.
_WATCHING_OPTIONS = ("jax_log_compiles", "jax_explain_cache_misses")
# Methods whose answer equal values do not share, so no guard on the values covers it: an
# object's allocation, the names it has (an attribute set in one process only), and a class's
# subclasses (a plugin defined in one process only).
_UNCOMPARED_METHODS = frozenset({"__sizeof__", "__dir__", "__subclasses__"})
# Counters: jax.trace.<what>.
SERVED, STALE, REFUSED, WRITES = "served", "stale", "refused", "writes"


def counter(what: str) -> str:
    return f"{FRAMEWORK}.{LAYER}.{what}"


class TraceRefused(Exception):
    """This call cannot use or record a trace entry (the reason is said in ``explain``)."""


@dataclass
class _Variant:
    """One stored trace of a signature, valid where its guards hold."""

    walk: str  # the digest of every guard
    guards: dict[str, str]
    libraries: dict[str, str]
    jax_key: str
    components: dict[str, str]
    recipe: dict[str, Any]
    executable: bytes  # JAX's UnloadedMeshExecutable, pickled without its executable
    out_tree: Any
    out_structure: str  # out_tree's structure_digest where it was recorded
    name: str
    created: float = field(default_factory=time.time)


@dataclass
class _Stored:
    """A variant as the entry keeps it: the fields its choice needs, and the variant pickled
    (unpickled only when chosen, on the program's thread: a pytree's unpickling is JAX's code)."""

    walk: str
    created: float
    jax_key: str
    name: str
    blob: bytes
    # installed module -> (the names of its plain-valued globals, the digest of their values)
    library_globals: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    library_files: dict[str, str] = field(default_factory=dict)  # installed module -> digest
    # module whose code ran (JAX's, the standard library's too) -> what it binds (bindings)
    library_bindings: dict[str, str] = field(default_factory=dict)
    # The variant's out_structure: two variants whose guards agree can differ in it alone.
    out_structure: str = ""

    @property
    def ident(self) -> str:
        """Which variant this is: its guards' digest, its installed modules' globals and files."""
        modules = ",".join(
            [f"{m}={d}" for m, (_, d) in sorted(self.library_globals.items())]
            + [f"{m}:{d}" for m, d in sorted(self.library_files.items())]
        )
        modules += f";{self.out_structure}"
        return self.walk + ":" + hashlib.sha256(modules.encode()).hexdigest()[:16]

    def same_as(self, other: _Stored) -> bool:
        """Whether ``other`` is this variant again: the same guards, and the same globals and
        files of the installed modules both ran (a first trace in a process runs more of them)."""
        common = self.library_globals.keys() & other.library_globals.keys()
        files = self.library_files.keys() & other.library_files.keys()
        return (
            self.walk == other.walk
            and self.out_structure == other.out_structure
            and all(self.library_globals[m][1] == other.library_globals[m][1] for m in common)
            and all(self.library_files[m] == other.library_files[m] for m in files)
        )

    def differs(self) -> str:
        """Why this variant's installed modules (their files, their plain globals) differ
        here (``""`` where they do not)."""
        # Files first: they are the same in every variant of a signature until one is edited,
        # and then the edit is what every variant says.
        for module, digest in self.library_files.items():
            if jax_guards.module_file_digest(module) != digest:
                return f"the installed module {module}'s file differs"
        for module, (names, digest) in self.library_globals.items():
            if jax_guards.plain_globals_digest(module, names) != digest:
                return f"a global of the installed module {module} differs"
        for module, digest in self.library_bindings.items():
            if bindings.module_digest(module) != digest:
                return f"what {module} binds differs (a function, class or registered rule)"
        return ""

    def load(self) -> _Variant:
        variant: _Variant = pickle.loads(self.blob)
        return variant


@dataclass
class _Served:
    """What ``_infer_params`` hands ``_run_python_pjit`` instead of a trace."""

    executable: Any
    out_tree: Any
    name: str
    # JAX's own trace of the call, for arguments the executable turns out not to take.
    retrace: Any = None


@dataclass
class _Recording:
    signature: str
    name: str
    walk: jax_guards.Walk
    call: tuple[Any, Any, Any, Any]  # fun, jit_info, args, kwargs: the roots again, after
    ran: dict[Any, dict[str, Any]]  # code that ran -> its globals
    c_calls: list[tuple[Any, Any]]  # (program code, a builtin it called)
    callers: set[tuple[Any, Any]] = field(default_factory=set)  # (program code, its caller)
    # (program code, globals): a code that ran with other globals than those in ``ran`` too.
    other_globals: list[tuple[Any, Any]] = field(default_factory=list)
    entered: set[Any] = field(default_factory=set)  # library code the program's code called
    again: bool = False  # an entry of the signature was there and not used
    params: Any = None
    compiles: list[dict[str, Any]] = field(default_factory=list)
    keys: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)


class _NoJaxpr:
    """What ``cache_miss`` reads of a trace's jaxpr after a served call: no effects, no
    constants (entries with either are never recorded)."""

    effects: tuple[Any, ...] = ()
    consts: tuple[Any, ...] = ()


class TraceCache:
    """Serves and records trace entries for one session (installed by the JAX integration)."""

    def __init__(self, cache: Cache, adapter: JaxCacheAdapter) -> None:
        self.cache = cache
        self.adapter = adapter
        self._local = threading.local()
        self._cache_miss_code: Any = None
        # The variants this process wrote (their idents), and their entries' keys with
        # them (a function traced again before its first write was done, after
        # ``jax.clear_caches()``, is not written twice).
        self._written: set[str] = set()
        self._kept: dict[str, list[_Stored]] = {}

    # -- install ---------------------------------------------------------------------------

    def install(self, patches: Patches) -> bool:
        """Wrap JAX's functions; ``False`` (nothing wrapped) where this JAX lacks them."""
        try:
            pjit = _private("jax._src.pjit")
            pxla = _private("jax._src.interpreters.pxla")
            compiler = _private("jax._src.compiler")
            compilation_cache = _private("jax._src.compilation_cache")
            self._cache_miss_code = _cache_miss_code(pjit)
            for module, name in (
                (pjit, "_infer_params"),
                (pjit, "_run_python_pjit"),
                (pjit, "_get_fastpath_data"),
                (pxla, "create_compile_options"),
                (compiler, "compile_or_get_cached"),
                (compilation_cache, "get_cache_key"),
                (compilation_cache, "get_executable_and_time"),
            ):
                if not callable(getattr(module, name, None)):
                    raise AttributeError(f"{module.__name__}.{name}")
        except (ImportError, AttributeError) as exc:
            log.debug("compilecache: JAX traces not kept: %s", exc)
            return False
        patches.wrap(pjit, "_infer_params", self._wrap_infer_params)
        patches.wrap(pjit, "_run_python_pjit", self._wrap_run)
        patches.wrap(pxla, "create_compile_options", self._wrap_create_options)
        patches.wrap(compiler, "compile_or_get_cached", self._wrap_compile)
        patches.wrap(compilation_cache, "get_cache_key", self._wrap_key)
        return True

    # -- the wrappers ----------------------------------------------------------------------

    def _wrap_infer_params(self, original: Any) -> Any:
        def _infer_params(fun: Any, jit_info: Any, args: Any, kwargs: Any) -> Any:
            if sys._getframe(1).f_code is not self._cache_miss_code:
                return original(fun, jit_info, args, kwargs)
            try:
                served, recording = self._begin(fun, jit_info, args, kwargs)
            except Exception as exc:  # never raise into JAX: it traces as always
                log.debug("compilecache: trace lookup failed: %s", exc)
                served, recording = None, None
            if served is not None:
                served[0].retrace = lambda: original(fun, jit_info, args, kwargs)
                return served
            if recording is None:
                return original(fun, jit_info, args, kwargs)
            return self._traced(original, recording, fun, jit_info, args, kwargs)

        return _infer_params

    def _wrap_run(self, original: Any) -> Any:
        def _run_python_pjit(p: Any, args_flat: Any, fun: Any, args: Any, kwargs: Any) -> Any:
            if isinstance(p, _Served):
                if _takes(p.executable, args_flat):
                    return _run_served(p, args_flat)
                # Checked before anything runs: the program gets JAX's own trace instead.
                self.cache.stats.add(counter(STALE))
                self._explain(
                    p.name,
                    PREFIX + p.name,
                    None,
                    "its stored executable does not take these arguments; traced again",
                    stored=False,
                )
                p, args_flat = p.retrace()
            recording: _Recording | None = getattr(self._local, "recording", None)
            if recording is None or recording.params is not p:
                return original(p, args_flat, fun, args, kwargs)
            self._local.capture = recording
            try:
                result = original(p, args_flat, fun, args, kwargs)
            finally:
                self._local.recording = None
                self._local.capture = None
            try:
                self._record(recording, p, result)
            except Exception as exc:  # the program has its result; the entry is not kept
                self._refused(recording.name, f"not recorded: {exc}")
            return result

        return _run_python_pjit

    def _wrap_create_options(self, original: Any) -> Any:
        def create_compile_options(
            computation: Any,
            tuple_args: Any,
            allow_prop_to_inputs: Any,
            allow_prop_to_outputs: Any,
            backend: Any,
            np_dev: Any,
            compiler_options: Any,
        ) -> Any:
            recording = getattr(self._local, "capture", None)
            overrides = dict(compiler_options)  # create_compile_options pops from it
            made = original(
                computation,
                tuple_args,
                allow_prop_to_inputs,
                allow_prop_to_outputs,
                backend,
                np_dev,
                compiler_options,
            )
            if recording is not None:
                try:
                    compiler = _private("jax._src.compiler")
                    recording.compiles.append(
                        {
                            "options": made,
                            "recipe": {
                                "tuple_args": bool(tuple_args),
                                "allow_in": [bool(b) for b in allow_prop_to_inputs],
                                "allow_out": [bool(b) for b in allow_prop_to_outputs],
                                "overrides": sorted(overrides.items()),
                                "detailed_logging": bool(
                                    compiler.use_detailed_logging(computation)
                                ),
                                "devices": [int(d.id) for d in np_dev.flat],
                            },
                        }
                    )
                except Exception as exc:
                    log.debug("compilecache: compile options not recorded: %s", exc)
            return made

        return create_compile_options

    def _wrap_compile(self, original: Any) -> Any:
        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            recording = getattr(self._local, "capture", None)
            if recording is None:
                return original(*args, **kwargs)
            keys_before = len(recording.keys)
            executable = original(*args, **kwargs)
            if recording.compiles and len(recording.keys) > keys_before:
                recording.compiles[-1]["executable"] = executable
                recording.compiles[-1]["key"] = recording.keys[-1]
                recording.compiles[-1]["backend"] = args[0] if args else kwargs.get("backend")
                computation = args[1] if len(args) > 1 else kwargs.get("computation")
                recording.compiles[-1]["targets"] = _custom_calls(computation)
            return executable

        return compile_or_get_cached

    def _wrap_key(self, original: Any) -> Any:
        def get_cache_key(
            module: Any, devices: Any, compile_options: Any, backend: Any, *a: Any, **k: Any
        ) -> str:
            key = original(module, devices, compile_options, backend, *a, **k)
            recording = getattr(self._local, "capture", None)
            if recording is not None:
                recording.keys.append((key, (*a, *k.values())))
            return key  # type: ignore[no-any-return]

        return get_cache_key

    # -- a call ----------------------------------------------------------------------------

    def _begin(
        self, fun: Any, jit_info: Any, args: Any, kwargs: Any
    ) -> tuple[Any, _Recording | None]:
        """Serve this call from a valid entry (JAX's ``(params, args_flat)`` for it), or say how
        to record its trace, or neither (it is traced as always)."""
        name = _name(fun)
        try:
            _check_context()
        except TraceRefused as exc:  # a call JAX traces inside another, or watched: not ours
            log.debug("compilecache: %s traced: %s", name, exc)
            return None, None
        try:
            flat = _flatten(jit_info, args, kwargs)
            leaves = flat[0]
            signature = _signature(fun, jit_info, args, kwargs, flat)
            roots = _roots(fun, jit_info, args, kwargs, flat)
            walk = _walk(roots)
        except (TraceRefused, jax_guards.Refused) as exc:
            self._refused(name, str(exc))
            return None, None
        if walk.refused is not None:
            self._refused(name, walk.refused)
            return None, None
        key = PREFIX + signature
        variants = self._variants(key)
        # Variants this process wrote are not stale for it: another value of the same function
        # here (a closure made again with other values) is a new variant.
        others = {i: v for i, v in variants.items() if i not in self._written}
        digest = walk.digest()
        matching = [v for v in variants.values() if v.walk == digest]
        chosen = _choose([v for v in matching if not v.differs()])
        if chosen is not None:
            served, why = self._serve(chosen)
            if served is not None:
                self.cache.stats.add(counter(SERVED))
                return (served, leaves), None
        elif matching:
            why = (
                matching[-1].differs() or "its output's pytree nodes are registered otherwise here"
            )
        elif others:
            why = _changed(others, walk)
        if chosen is not None or matching or others:
            self.cache.stats.add(counter(STALE))
            self._explain(name, key, walk, f"its stored trace was not used ({why}); traced again")
        if sys.getprofile() is not None:
            self._refused(name, "a profiler of the program's own is running")
            return None, None
        recording = _Recording(key, name, walk, (fun, jit_info, args, kwargs), {}, [])
        recording.again = bool(chosen is not None or matching or others)
        return None, recording

    def _traced(
        self, original: Any, recording: _Recording, fun: Any, jit_info: Any, args: Any, kwargs: Any
    ) -> Any:
        """JAX's trace, under a profiler that lists the code it ran."""
        ran, c_calls, callers = recording.ran, recording.c_calls, recording.callers
        other_globals, entered = recording.other_globals, recording.entered
        # Whether each code object is an installed package's (True) or the program's: almost
        # every event of a trace is JAX's own code, so the common path is one lookup.
        library: dict[Any, bool] = {}
        is_library = jax_guards.is_library_code

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                code = frame.f_code
                trusted = library.get(code)
                if trusted is None:
                    trusted = library[code] = is_library(code)
                    ran[code] = frame.f_globals
                if trusted:
                    back = frame.f_back  # called by the program's own code: which library
                    if back is not None and library.get(back.f_code) is False:
                        entered.add(code)
                else:
                    seen = ran.setdefault(code, frame.f_globals)
                    if seen is not frame.f_globals:  # one code run with other globals too
                        other_globals.append((code, frame.f_globals))
                    back = frame.f_back
                    callers.add((code, back.f_code if back is not None else None))
            elif event == "c_call":
                code = frame.f_code
                trusted = library.get(code)
                if trusted is None:
                    trusted = library[code] = is_library(code)
                if not trusted:
                    c_calls.append((code, arg))

        sys.setprofile(profile)
        try:
            result = original(fun, jit_info, args, kwargs)
        finally:
            sys.setprofile(None)
        recording.params = result[0]
        self._local.recording = recording
        return result

    # -- serving ---------------------------------------------------------------------------

    def _variants(self, key: str) -> dict[str, _Stored]:
        try:
            found = self.cache.load_uncounted(FRAMEWORK, key)
        except Exception as exc:
            log.debug("compilecache: trace entry %s not read: %s", key, exc)
            return {}
        if found is None:
            return {}
        try:
            stored = pickle.loads(found.payload)
            if stored.get("format") != FORMAT:
                return {}
            return {v.ident: v for v in stored["variants"]}
        except Exception as exc:
            log.debug("compilecache: trace entry %s not usable: %s", key, exc)
            return {}

    def _serve(self, variant: _Variant) -> tuple[_Served | None, str]:
        """The stored executable for ``variant`` on this host, or why not."""
        for library, version in variant.libraries.items():
            if _library_version(library) != version:
                return None, f"{library} is {_library_version(library)}, not {version}"
        compilation_cache = _private("jax._src.compilation_cache")
        xla_bridge = _private("jax._src.xla_bridge")
        recipe = variant.recipe
        if recipe["platform"] not in SERVED_PLATFORMS:
            return None, f"traces are served on {', '.join(SERVED_PLATFORMS)} only"
        missing = _unready_custom_calls(recipe.get("targets"), recipe["platform"])
        if missing:
            return None, f"its executable calls {missing}, not ready in this process"
        backend = xla_bridge.get_backend(recipe["platform"])
        if compilation_cache._get_cache(backend) is not self.adapter:
            return None, "JAX's persistent cache is not compilecache's here"
        if self.adapter.check_contents:
            return None, "jax_compilation_cache_check_contents is set"
        by_id = {int(d.id): d for d in backend.devices()}
        if any(i not in by_id for i in recipe["devices"]):
            return None, "its devices are not this host's"
        devices = [by_id[i] for i in recipe["devices"]]
        options = _build_options(recipe, backend, devices)
        components = _other_components(devices, options, backend)
        if components != variant.components:
            changed = sorted(k for k in components if components[k] != variant.components.get(k))
            return None, f"JAX's key would differ here ({', '.join(changed) or 'its steps'})"
        xla_client = _private("jax._src.lib").xla_client
        executable_devices = xla_client.DeviceList(tuple(devices))
        start = time.perf_counter()  # not time.monotonic, which JAX's own tests mock
        with self.adapter.probing():
            loaded, compile_time = compilation_cache.get_executable_and_time(
                variant.jax_key, options, backend, executable_devices
            )
        if loaded is None:
            return None, "its executable is not in the store"
        # JAX's own events of a persistent-cache hit, as compile_or_get_cached records them.
        monitoring = _private("jax._src.monitoring")
        retrieval = time.perf_counter() - start
        monitoring.record_event("/jax/compilation_cache/compile_requests_use_cache")
        monitoring.record_event("/jax/compilation_cache/cache_hits")
        monitoring.record_event_duration_secs(
            "/jax/compilation_cache/compile_time_saved_sec", (compile_time or 0) - retrieval
        )
        monitoring.record_event_duration_secs(
            "/jax/compilation_cache/cache_retrieval_time_sec", retrieval
        )
        unloaded = _unpickle(variant.executable, backend, devices, loaded)
        return _Served(unloaded.load(), variant.out_tree, variant.name), ""

    # -- recording -------------------------------------------------------------------------

    def _record(self, recording: _Recording, params: Any, result: Any) -> None:
        """Check at once what the call left (the trace, the values it read, the compile), then
        hand the entry's making to the background thread. Raises :class:`TraceRefused`."""
        executable = result[5]
        if params.consts or result[7]:
            raise TraceRefused("its trace holds constants")
        if params.params["jaxpr"].effects:
            raise TraceRefused("its trace has effects")
        unloaded = getattr(executable, "_unloaded_executable", None)
        if unloaded is None:
            raise TraceRefused("its executable cannot be kept")
        if unloaded.host_callbacks or unloaded.ordered_effects or unloaded.unordered_effects:
            raise TraceRefused("it calls back to the host")
        if unloaded.pgle_profiler is not None or getattr(unloaded, "mut", None):
            raise TraceRefused("it is profiled for PGLE or mutates arrays")
        compiled = [c for c in recording.compiles if c.get("executable") is unloaded.xla_executable]
        if len(compiled) != 1:
            raise TraceRefused("its compile went around JAX's persistent cache")
        compile_ = compiled[0]
        _, key_rest = compile_["key"]
        if any(getattr(a, "name", "NO") != "NO" for a in key_rest):
            raise TraceRefused("its key ignores host callbacks")
        covered = self._uncovered(recording)
        if covered:
            raise TraceRefused(covered)
        rules = bindings.program_rules(jax_guards.is_library_code)
        if rules:
            raise TraceRefused(
                f"the program registered its own lowering rule ({', '.join(rules[:3])}): it runs "
                "when the trace is lowered, which a served trace skips"
            )
        after = _walk(_roots(*recording.call))
        if after.refused is not None or after.digest() != recording.walk.digest():
            raise TraceRefused(
                f"the trace changed a value it read ({_changed_paths(recording.walk, after)})"
            )
        made = self._make(recording, params.out_tree, unloaded, compile_)
        # The write is the background thread's, off the program's path. Everything that calls
        # into JAX is done above, on this thread: a daemon thread inside XLA's C++ code when the
        # interpreter exits aborts the process.
        self.cache.save_later(recording.signature, functools.partial(self._keep, recording, *made))

    def _keep(self, recording: _Recording, variant: _Stored, readable: dict[str, str]) -> None:
        """Write the trace entry of ``recording`` (on the background thread). Never raises."""
        try:
            if self._write(recording.signature, variant, readable):
                kept = "its new trace is kept beside the earlier ones" if recording.again else ""
                self._explain(recording.name, recording.signature, recording.walk, kept)
        except Exception as exc:
            self._refused(recording.name, f"not recorded: {exc}")

    def _make(
        self, recording: _Recording, out_tree: Any, unloaded: Any, compile_: Any
    ) -> tuple[_Stored, dict[str, str]]:
        """The variant of ``recording``, pickled, and its backend in words. Raises."""
        key, _ = compile_["key"]
        backend = compile_["backend"]
        recipe = dict(
            compile_["recipe"],
            platform=str(backend.platform),
            targets=compile_.get("targets"),
        )
        devices = list(unloaded.device_list)
        options = _build_options(recipe, backend, devices)
        if options.SerializeAsString() != compile_["options"].SerializeAsString():
            raise TraceRefused("its compile options cannot be built again")
        out_structure = jax_guards.structure_digest(out_tree)
        if out_structure is None:
            raise TraceRefused("its output's pytree nodes cannot be compared")
        variant = _Variant(
            walk=recording.walk.digest(),
            guards=recording.walk.guards(),
            libraries=_libraries(recording.ran),
            jax_key=key,
            components=_other_components(devices, compile_["options"], backend),
            recipe=recipe,
            executable=_pickle(unloaded),
            out_tree=out_tree,
            out_structure=out_structure,
            name=recording.name,
        )
        # Its backend and devices in the words JAX's entries use (bundles and `ls` read them).
        readable = readable_components(_device_array(devices), compile_["options"], backend, "")
        modules = jax_guards.library_modules(recording.ran)
        ran = sorted({*jax_guards.ran_modules(recording.ran), *bindings.LOWERING_MODULES})
        stored = _Stored(
            variant.walk,
            variant.created,
            variant.jax_key,
            variant.name,
            pickle.dumps(variant),
            {m: _plain_globals(m) for m in modules},
            {m: jax_guards.module_file_digest(m) for m in modules},
            {m: bindings.module_digest(m) for m in ran},
            out_structure,
        )
        return stored, readable

    def _uncovered(self, recording: _Recording) -> str:
        """Why the trace ran something the guards do not cover (``""`` when it did not)."""
        for code, globals_ in [*recording.ran.items(), *recording.other_globals]:
            if jax_guards.is_library_code(code):
                continue
            denied = jax_guards.denied_builtin(code, globals_)
            if denied is not None and not _hashing_for_jax(code, denied, recording.callers):
                return f"{code.co_qualname} calls {denied}() while tracing"
            if jax_guards.HASH_ORDER and jax_guards.builds_sets(code):
                return (
                    f"{code.co_qualname} builds a set while tracing (its order follows Python's "
                    "per-process string hashing; PYTHONHASHSEED=0 fixes it)"
                )
            if code in recording.walk.codes:
                if not any(g is globals_ for g in recording.walk.namespaces.get(code, ())):
                    return (
                        f"the trace ran {code.co_qualname} with globals no guard covers "
                        "(its code made into a function of other globals)"
                    )
                continue
            if code.co_filename == "<string>" and _library_namespace(globals_):
                continue  # made by exec inside an installed package (a dataclass's __init__)
            return (
                f"the trace ran {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}), "
                "which no guard covers"
            )
        for code in recording.entered:
            entered = str(recording.ran.get(code, {}).get("__name__", ""))
            if jax_guards.denied_module(entered) or _numpy_io(entered, code.co_name):
                return f"the program called {entered}.{code.co_qualname} while tracing"
        for caller, called in recording.c_calls:
            module = getattr(called, "__module__", None) or getattr(
                getattr(called, "__self__", None), "__name__", ""
            )
            name = getattr(called, "__name__", "")
            owner = type(getattr(called, "__self__", None)).__module__
            if _numpy_io(str(module or owner), name):
                return f"the program called NumPy's {name} while tracing"
            if name in _UNCOMPARED_METHODS:
                return f"the program called {name} while tracing"
            if name in ("encode", "decode") and isinstance(
                getattr(called, "__self__", None), (str, bytes, bytearray)
            ):
                # The codec and the error handler are looked up by name in registries the
                # program can add to (codecs.register), which no guard compares.
                return f"the program called {type(called.__self__).__name__}.{name} while tracing"
            if jax_guards.denied_module(str(module or owner)) or (
                module == "builtins"
                and name in jax_guards.DENIED_BUILTINS
                and not _hashing_for_jax(caller, name, recording.callers)
            ):
                return f"the program called {module}.{name} while tracing"
        return ""

    def _write(self, key: str, variant: _Stored, readable: dict[str, str]) -> bool:
        """Store ``variant`` beside the others of its signature (the oldest beyond
        ``VARIANTS`` dropped). Runs on the background thread, after the executable's own write
        (the same queue): a trace is kept only beside an executable the store holds, not one
        JAX or compilecache chose not to store."""
        if any(v.same_as(variant) for v in self._kept.get(key, ())):
            return False  # this process wrote this very variant already
        if not self.cache.writes(key):
            # Read-only, or the entry there is signed with another key (left in place): not
            # read again (a second foreign read, a round trip) for a write save would refuse.
            return False
        if self.cache.store.stat(store_key(variant.jax_key)) is None:
            return False
        # An entry signed with another key (replaced in this host's own levels) has no variants
        # this process can keep: not read again.
        variants = {} if self.cache.is_foreign(key) else self._variants(key)
        variants = {i: v for i, v in variants.items() if not v.same_as(variant)}
        kept = sorted(variants.values(), key=lambda v: v.created)[-(VARIANTS - 1) :]
        payload = pickle.dumps({"format": FORMAT, "variants": [*kept, variant]})
        header = EntryHeader(
            framework=FRAMEWORK,
            key=key,
            name=variant.name,
            versions=jax_versions(),
            extra={
                "layer": LAYER,
                "executable": variant.jax_key,
                "readable": {
                    k: v
                    for k, v in readable.items()
                    if k in ("backend version", "accelerator_config", "jax_lib version")
                },
            },
        )
        if not self.cache.save(header, payload, any_time=True, counted=False):
            return False
        self._written.add(variant.ident)
        self._kept.setdefault(key, []).append(variant)
        self.cache.stats.add(counter(WRITES))
        return True

    # -- telling ---------------------------------------------------------------------------

    def _refused(self, name: str, why: str) -> None:
        self.cache.stats.add(counter(REFUSED))
        log.info("compilecache: the trace of %s is not kept: %s", name, why)
        self._explain(name, PREFIX + "refused/" + name, None, f"traced: {why}", stored=False)

    def _explain(
        self, name: str, key: str, walk: jax_guards.Walk | None, why: str, stored: bool = True
    ) -> None:
        """Say why ``name`` was traced (``explain`` lists it with the program's misses; it is
        not counted as one: its executable's lookup is)."""
        from compilecache.runtime import explain

        explain.record_miss(
            self.cache,
            framework=FRAMEWORK,
            name=name,
            key=key,
            components=walk.guards() if walk is not None else {},
            prefix=None,
            stored=stored,
            reason="" if stored else "its trace is not kept",
            background=True,
            why=why or "traced for the first time; its trace is kept with its guards",
            counted=False,
        )


# -- helpers ---------------------------------------------------------------------------------


def _cache_miss_code(pjit: Any) -> Any:
    """The code object of the ``cache_miss`` closures ``_cpp_pjit`` makes."""
    for const in pjit._cpp_pjit.__code__.co_consts:
        if getattr(const, "co_name", "") == "cache_miss":
            return const
    raise AttributeError("pjit._cpp_pjit has no cache_miss")


def _name(fun: Any) -> str:
    inner = getattr(fun, "__wrapped__", fun)
    return str(getattr(inner, "__qualname__", getattr(inner, "__name__", type(inner).__name__)))


def _check_context() -> None:
    """Refuse where a served trace could differ from JAX's: a trace under way, an active mesh,
    a multi-process job, JAX's options that ask to see tracing, PGLE."""
    if _private("jax._src.xla_bridge").process_count() != 1:
        # Each process's executable is its own (its process index is in JAX's key): one trace
        # entry per signature would name one process's, stale for every other at each restart.
        raise TraceRefused("a multi-process job")
    core = _private("jax._src.core")
    config = _private("jax._src.config")
    if not core.trace_state_clean():
        raise TraceRefused("called inside another trace")
    for option in _WATCHING_OPTIONS:
        if getattr(config, option.removeprefix("jax_"), None) is not None and bool(
            getattr(config, option.removeprefix("jax_")).value
        ):
            raise TraceRefused(f"{option} is set")
    if config.enable_pgle.value or config.compilation_cache_expect_pgle.value:
        raise TraceRefused("PGLE is on")
    mesh = _private("jax._src.mesh")
    abstract = getattr(mesh, "get_abstract_mesh", None)
    if abstract is not None and not getattr(abstract(), "empty", True):
        raise TraceRefused("a mesh is in context")
    resources = getattr(mesh, "thread_resources", None)
    if resources is not None and not resources.env.physical_mesh.empty:
        raise TraceRefused("a mesh is in context")


def _static(jit_info: Any, args: Any, kwargs: Any) -> tuple[set[int], set[str]]:
    count = len(args)
    numbers = {i if i >= 0 else i + count for i in jit_info.static_argnums}
    return {i for i in numbers if 0 <= i < count}, set(jit_info.static_argnames) & set(kwargs)


def _flatten(jit_info: Any, args: Any, kwargs: Any) -> tuple[list[Any], Any]:
    """The call's dynamic leaves and their structure, flattened as JAX flattens them."""
    static_numbers, static_names = _static(jit_info, args, kwargs)
    dynamic = tuple(a for i, a in enumerate(args) if i not in static_numbers)
    dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
    leaves, treedef = _private("jax._src.tree_util").tree_flatten((dynamic, dynamic_kwargs))
    return leaves, treedef


def _choose(candidates: list[_Stored]) -> _Variant | None:
    """The first of ``candidates`` (variants whose guards hold here) whose output rebuilds here
    as where it was recorded: its pytree nodes registered alike (the guards do not cover the
    output; two variants can differ in that alone)."""
    for stored in candidates:
        variant = stored.load()
        if jax_guards.structure_digest(variant.out_tree) == variant.out_structure:
            return variant
    return None


def _signature(fun: Any, jit_info: Any, args: Any, kwargs: Any, flat: Any) -> str:
    """The lookup key of this call (``flat``: its :func:`_flatten`)."""
    core = _private("jax._src.core")
    static_numbers, static_names = _static(jit_info, args, kwargs)
    leaves, treedef = flat
    h = hashlib.sha256()
    module = getattr(getattr(fun, "__func__", fun), "__module__", None) or type(fun).__module__
    h.update(f"{module}.{_name(fun)}\0{treedef}\0".encode())
    h.update(repr(sorted(static_numbers)).encode() + repr(sorted(static_names)).encode())
    for leaf in leaves:
        if isinstance(leaf, core.Tracer):
            raise TraceRefused("called with tracers")
        try:
            aval = core.shaped_abstractify(leaf)
        except Exception as exc:
            raise TraceRefused(f"an argument of type {type(leaf).__name__}") from exc
        sharding = getattr(leaf, "sharding", None) if hasattr(leaf, "_committed") else None
        h.update(
            f"{type(leaf).__module__}.{type(leaf).__name__}|{aval.str_short(short_dtypes=False)}"
            f"|{getattr(aval, 'weak_type', False)}|{sharding!r}"
            f"|{getattr(leaf, '_committed', None)}\0".encode()
        )
    h.update(repr(sorted(jax_versions().items())).encode())
    h.update(sys.version.encode())
    return h.hexdigest()


def _roots(
    fun: Any, jit_info: Any, args: Any, kwargs: Any, flat: Any = None
) -> list[tuple[str, Any]]:
    """What the guards are walked from (``flat``: the call's :func:`_flatten`, else made)."""
    config = _private("jax._src.config")
    static_numbers, static_names = _static(jit_info, args, kwargs)
    _, treedef = flat if flat is not None else _flatten(jit_info, args, kwargs)
    options = {
        name: holder.value
        for name, holder in sorted(config.config._value_holders.items())
        if name not in _IRRELEVANT_OPTIONS
    }
    roots: list[tuple[str, Any]] = [
        ("the function", fun),
        ("the jit's options", jax_guards.jit_info_fields(jit_info)),
        ("the arguments' structure", treedef),
        ("JAX's configuration", options),
        ("the interpreter's and NumPy's settings", jax_guards.process_state()),
    ]
    # The function's own values again under their names, so that explain can say which changed.
    function = getattr(fun, "__func__", fun)
    code = getattr(function, "__code__", None)
    if code is not None:
        roots.append(("its default arguments", (function.__defaults__, function.__kwdefaults__)))
        for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=False):
            try:
                roots.append((f"its closure cell {name}", cell.cell_contents))
            except ValueError:
                continue
    roots += [(f"static argument {i}", args[i]) for i in sorted(static_numbers)]
    roots += [(f"static argument {n}", kwargs[n]) for n in sorted(static_names)]
    return roots


# The roots that are settings (compared by value only).
_SETTINGS = frozenset({"JAX's configuration", "the interpreter's and NumPy's settings"})


def _walk(roots: list[tuple[str, Any]]) -> jax_guards.Walk:
    walk = jax_guards.Walk()
    for path, value in roots:
        walk.root(path, value, aliases=path not in _SETTINGS)
    return walk.finish()


def _changed(variants: dict[str, _Stored], walk: jax_guards.Walk) -> str:
    newest = max(variants.values(), key=lambda v: v.created).load()
    now = walk.guards()
    changed = [
        p for p in sorted(set(now) | set(newest.guards)) if now.get(p) != newest.guards.get(p)
    ]
    return ("changed: " + ", ".join(changed[:5])) if changed else "its guards differ"


def _changed_paths(before: jax_guards.Walk, after: jax_guards.Walk) -> str:
    a, b = before.guards(), after.guards()
    changed = [p for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]
    return ", ".join(changed[:5]) or (after.refused or "?")


def _hashing_for_jax(code: Any, denied: str, callers: set[tuple[Any, Any]]) -> bool:
    """Whether ``code`` is a ``__hash__`` that only JAX called (to find a static argument in
    its caches): the hash it takes (of strings, randomised per process) cannot reach the trace."""
    if denied != "hash" or code.co_name != "__hash__":
        return False
    called_by = [caller for callee, caller in callers if callee is code]
    return all(c is not None and jax_guards.is_library_code(c) for c in called_by)


def _plain_globals(module: str) -> tuple[tuple[str, ...], str]:
    names = jax_guards.plain_globals(module)
    return names, jax_guards.plain_globals_digest(module, names)


def _numpy_io(module: str, name: str) -> bool:
    """Whether a NumPy function reads or writes a file."""
    return module.split(".", 1)[0] == "numpy" and name in jax_guards.DENIED_NUMPY_FUNCTIONS


def _library_namespace(globals_: dict[str, Any]) -> bool:
    """Whether exec'd code runs in an installed module's namespace (or a namedtuple's own)."""
    name = str(globals_.get("__name__", ""))
    if name.startswith("namedtuple_"):
        return True
    module = sys.modules.get(name)
    filename = getattr(module, "__file__", None) or ""
    return bool(filename) and vars(module) is globals_ and jax_guards.is_library_file(filename)


def _libraries(ran: dict[Any, Any]) -> dict[str, str]:
    """The versions of the installed packages whose code the trace ran."""
    found: dict[str, str] = {}
    for code in ran:
        package = _package_of(code.co_filename)
        if package and package not in found:
            found[package] = _library_version(package)
    return found


def _package_of(filename: str) -> str:
    """The top-level name of the installed package ``filename`` belongs to, ``""`` if none."""
    rest = jax_guards.installed_rest(filename)
    if rest is None:
        return ""
    top = rest.split("/", 1)[0].removesuffix(".py")
    return top if "." not in top else ""


_VERSIONS: dict[str, str] = {}


def _library_version(package: str) -> str:
    version = _VERSIONS.get(package)
    if version is None:
        module = sys.modules.get(package)
        version = str(getattr(module, "__version__", "") or "")
        if not version:
            try:
                from importlib import metadata

                version = metadata.version(package)
            except Exception:
                version = "unknown"
        _VERSIONS[package] = version
    return version


def _custom_calls(computation: Any) -> list[str] | None:
    """The custom-call targets of a lowered module (kernels outside XLA: LAPACK's, FFI calls);
    ``None`` when they cannot be read (such an entry is never served)."""
    try:
        ir = _private("jax._src.lib.mlir").ir
        found: set[str] = set()

        def visit(op: Any) -> Any:
            operation = getattr(op, "operation", op)
            if operation.name == "stablehlo.custom_call":
                found.add(ir.StringAttr(operation.attributes["call_target_name"]).value)
            return ir.WalkResult.ADVANCE

        computation.operation.walk(visit)
        return sorted(found)
    except Exception as exc:
        log.debug("compilecache: custom calls not read: %s", exc)
        return None


def _unready_custom_calls(targets: list[str] | None, platform: str) -> str:
    """The first custom-call target the executable needs that this process has not readied
    (``""`` when all are ready). A trace readies them while it lowers (LAPACK's kernels are
    initialised by their lowering rules): without the trace, they are readied here as JAX's
    own ``jax.export`` readies them, or the function is traced."""
    if targets is None:
        return "kernels that were not recorded"
    if not targets:
        return ""
    if platform == "cpu" and any(t.startswith("lapack_") for t in targets):
        _private("jax._src.lax.linalg").initialize_lapack()
    registered = _private("jax._src.lib")._jax.custom_call_targets(platform)
    return next((t for t in targets if t not in registered), "")


def _device_array(devices: list[Any]) -> Any:
    """``devices`` as the NumPy array of objects JAX's key and compile options take."""
    array = sys.modules["numpy"].empty(len(devices), dtype=object)
    for i, device in enumerate(devices):
        array[i] = device
    return array


def _build_options(recipe: dict[str, Any], backend: Any, devices: list[Any]) -> Any:
    """The compile options JAX builds on this host for what ``recipe`` recorded (as
    ``pxla.create_compile_options`` builds them)."""
    compiler = _private("jax._src.compiler")
    count = len(devices)
    assignment = _device_array(devices).reshape((1, count))
    options = compiler.get_compile_options(
        num_replicas=1,
        num_partitions=count,
        device_assignment=assignment,
        env_options_overrides=dict(recipe["overrides"]),
        fdo_profile=None,
        detailed_logging=recipe["detailed_logging"],
        backend=backend,
    )
    build = options.executable_build_options
    options.parameter_is_tupled_arguments = recipe["tuple_args"]
    build.allow_spmd_sharding_propagation_to_parameters = list(recipe["allow_in"])
    build.allow_spmd_sharding_propagation_to_output = list(recipe["allow_out"])
    return options


def _other_components(devices: list[Any], options: Any, backend: Any) -> dict[str, str]:
    """The hash of each step of JAX's key but the computation, as this host computes it."""
    ck = _private("jax._src.cache_key")
    compilation_cache = _private("jax._src.compilation_cache")
    array = _device_array(devices)
    compression = compression_name(compilation_cache)
    ignore = getattr(getattr(ck, "IgnoreCallbacks", None), "NO", None)
    steps = key_steps(ck, None, array, jax_xla.key_options(options), backend, ignore, compression)
    hashes: dict[str, str] = {}
    for name, step in steps.items():
        if name == "computation":
            continue
        recorder = Recorder()
        step(recorder)
        hashes[name] = hashlib.sha256(recorder.data()).hexdigest()
    passes = PASSES.digest()
    if passes:  # the XLA passes the program registered: served only where the same are
        hashes["xla passes"] = passes
    return hashes


def _takes(executable: Any, args_flat: Any) -> bool:
    """Whether the stored executable takes these arguments (JAX's checks of them, made before
    anything runs, so that a mismatch can still be traced)."""
    try:
        dispatch = _private("jax._src.dispatch")
        core = _private("jax._src.core")
        for arg in args_flat:
            dispatch.check_arg(arg)
        info = getattr(executable, "_all_args_info", None)
        if info is not None:
            avals = [core.shaped_abstractify(a) for a in args_flat]
            return len(avals) == len(info.in_avals) and all(
                a == b for a, b in zip(avals, info.in_avals, strict=True)
            )
        return True
    except Exception:
        return False


def _run_served(served: _Served, args_flat: Any) -> Any:
    """``_run_python_pjit``'s result for a served call: the stored executable run with JAX's own
    checks of its arguments."""
    tree_util = _private("jax._src.tree_util")
    out_flat = served.executable.call(*args_flat)
    outs = tree_util.tree_unflatten(served.out_tree, out_flat)
    return (outs, out_flat, served.out_tree, args_flat, _NoJaxpr(), served.executable, None, [])


class _Pickler(pickle.Pickler):
    """JAX's ``UnloadedMeshExecutable`` without its executable (JAX's own entry holds that),
    its devices and client by reference (``serialize_executable``'s way)."""

    def persistent_id(self, obj: Any) -> Any:
        xc = _private("jax._src.lib").xla_client
        if isinstance(obj, xc.LoadedExecutable):
            return ("exec",)
        if isinstance(obj, xc.Device):
            return ("device", int(obj.id))
        if isinstance(obj, xc.Client):
            return ("client",)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, backend: Any, devices: list[Any], executable: Any) -> None:
        super().__init__(io.BytesIO(data))
        self.backend = backend
        self.by_id = {int(d.id): d for d in backend.devices()}
        self.executable = executable

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "exec":
            return self.executable
        if pid[0] == "device":
            return self.by_id[pid[1]]
        if pid[0] == "client":
            return self.backend
        raise pickle.UnpicklingError(f"unknown reference {pid[0]}")


def _pickle(unloaded: Any) -> bytes:
    with io.BytesIO() as file:
        _Pickler(file).dump(unloaded)
        return file.getvalue()


def _unpickle(data: bytes, backend: Any, devices: list[Any], executable: Any) -> Any:
    return _Unpickler(data, backend, devices, executable).load()
