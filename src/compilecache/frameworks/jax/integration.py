"""JAX integration: route JAX's persistent compilation cache through compilecache.

The hook: replace
``jax._src.compilation_cache.get_file_cache`` with a factory that returns our adapter, and point
``jax_compilation_cache_dir`` at a constant marker. It survives ``reset_cache()``, works whether we
are installed before or after ``import jax`` (as long as it is before the first compile), and keeps
the cache key independent of where the store lives: the 0.10.x pitfall that writes the cache
directory into every key through XLA's cache options is neutralised twice, by the constant marker
and by computing the key with those paths cleared, while XLA gets real directories on this host
and its autotune results travel through the store (:mod:`compilecache.frameworks.jax.xla`).

We also wrap ``compilation_cache.get_cache_key`` (looked up at call time by ``compiler.py``) to
remember the arguments of each key, so that after a miss the key components can be hashed one by
one and stored with the entry for miss explanations. That costs one extra key computation per
*miss*, after the compile; hits pay nothing. The steps of JAX's key differ between releases
(0.4.30 has seven, 0.10 eight): they are chosen from the helpers' signatures and checked against
the real key (:func:`key_components`).

JAX's own settings keep their meaning (the program's, set in its environment or in code, before
or after ``enable()``): compilecache sets only the cache directory, and only where the program
set none. ``jax_enable_compilation_cache=False`` turns JAX's cache off, and compilecache's with
it; ``jax_persistent_cache_min_compile_time_secs`` and ``..._min_entry_size_bytes`` are applied by
JAX's own write path (where the program left the minimum compile time at JAX's default,
compilecache writes faster compiles too: ``COMPILECACHE_MIN_COMPILE_TIME`` is its threshold, 0 by
default); a directory the program names (``jax_compilation_cache_dir``, ``set_cache_dir()``,
``JAX_COMPILATION_CACHE_DIR``) is served from compilecache's store and left alone, and each of
these is said once (the summary line, ``explain``, ``doctor``).

``jax_compilation_cache_check_contents`` is honoured as JAX's own ``VerificationCache`` does it:
the first lookup of each key in a process compiles afresh, and the result is compared with the
stored executable. A mismatch raises JAX's ``CacheVerificationError`` from the write, the one
exception the adapter lets through: JAX raises it to the program, as with its own cache, because
that is what the flag asks for. The cache JAX builds is then an instance of JAX's own
``VerificationCache`` over the adapter, as ``get_file_cache`` answers without compilecache.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compilecache.config import Config
from compilecache.frameworks.jax import preload as jax_preload
from compilecache.frameworks.jax import traces as jax_traces
from compilecache.frameworks.jax import xla as jax_xla
from compilecache.frameworks.jax.adapter import (
    FRAMEWORK,
    MARKER_DIR,
    JaxCacheAdapter,
    adapter_class,
    as_seconds,
    store_key,
    verifying_view,
)
from compilecache.frameworks.jax.key import KeyTap, compression_name, positional, tap_key_steps
from compilecache.frameworks.jax.passes import PASSES
from compilecache.frameworks.jax.settings import (
    DIR_OPTION,
    ENABLE_OPTION,
    MIN_SIZE_OPTION,
    MIN_TIME_OPTION,
    ProgramSettings,
    check_contents_wanted,
    directory_note,
    jax_value,
    settings_notes,
)
from compilecache.host import framework_module as _private
from compilecache.patches import Patches
from compilecache.runtime import explain
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

_REQUIRED = ("get_file_cache", "get_cache_key", "reset_cache", "_get_cache")


@dataclass
class _Installed:
    adapter: JaxCacheAdapter
    settings: ProgramSettings
    notes: explain.SettingNotes
    patches: Patches
    # The directory option as it was (None: compilecache set it to MARKER_DIR, and unsets it).
    saved_dir: Any = None
    set_dir: bool = False
    # XLA's cache directories (xla.py).
    xla: jax_xla.XlaCaches | None = None
    # COMPILECACHE_WRITERS: "all" processes of a multi-process job write, or only the "first".
    writers: str = "all"
    watches_writes: bool = False
    # The read-ahead of the job's executables (None: no manifest, COMPILECACHE_PREFETCH=0).
    preloader: jax_preload.Preloader | None = None
    # Stored traces served on a warm start (None: COMPILECACHE_JAX_PRECOMPILE=0, an untested JAX).
    traces: jax_traces.TraceCache | None = None


_installed: _Installed | None = None


def hook_available() -> tuple[bool, str]:
    """Whether this JAX has the private functions the hook needs; the reason when it does not."""
    try:
        cache_key = _private("jax._src.cache_key")
        compilation_cache = _private("jax._src.compilation_cache")
    except ImportError as exc:
        return False, f"cannot import jax._src.compilation_cache: {exc}"
    missing = [name for name in _REQUIRED if not hasattr(compilation_cache, name)]
    missing += [
        f"cache_key.{n}"
        for n in ("_hash_computation", "_hash_platform", "get_flag_prefixes", "custom_hook")
        if not hasattr(cache_key, n)
    ]
    if missing:
        return False, f"this JAX lacks {', '.join(missing)}"
    return True, ""


def install(cache: Cache, cfg: Config) -> bool:
    """Route JAX's persistent cache through ``cache`` (``cfg``: the session's configuration);
    ``False`` (with one warning) if impossible."""
    global _installed
    jax = _private("jax")
    compilation_cache = _private("jax._src.compilation_cache")
    ok, reason = hook_available()
    if not ok:
        cache.warn_once(
            "jax:hook", f"JAX {jax.__version__} is not supported ({reason}); JAX left alone"
        )
        return False
    if _installed is not None:
        uninstall()
    _hide_frames()
    adapter = adapter_class()(cache, _writes_here)
    installed = _Installed(
        adapter, ProgramSettings(), explain.SettingNotes(cache, FRAMEWORK), Patches()
    )
    notes = installed.notes

    def get_file_cache(_jax_factory: Callable[[str], Any]) -> Callable[[str], Any]:
        def get_file_cache(path: str) -> tuple[JaxCacheAdapter, str] | None:
            # Any directory JAX builds its cache for is served from the store: the marker, or
            # the one the program named (left alone, and said once).
            if path != MARKER_DIR:
                notes.note(directory_note(path, cache.store.url))
            checking = check_contents_wanted(cache)
            adapter.configure(checking)
            # Checking contents, JAX's own answer is a VerificationCache: so is ours.
            view = verifying_view(adapter) if checking else None
            return (view or adapter), path

        return get_file_cache

    tap = KeyTap()

    def get_cache_key(original_key: Callable[..., str]) -> Callable[..., str]:
        def get_cache_key(
            module: Any, devices: Any, compile_options: Any, backend: Any, *args: Any, **kwargs: Any
        ) -> str:
            # XLA's cache paths (xla.py) differ per host: the key is computed without them.
            compile_options = jax_xla.key_options(compile_options)
            key, hashes = tap.record(
                lambda: original_key(module, devices, compile_options, backend, *args, **kwargs)
            )
            # An XLA pass the program registered changes what is compiled, not JAX's key.
            key = PASSES.keyed(key)
            try:
                # JAX 0.4.30 has no IgnoreCallbacks (nor the argument): then it is never used.
                ignore_type = getattr(_private("jax._src.cache_key"), "IgnoreCallbacks", None)
                no_ignore = getattr(ignore_type, "NO", None)
                ignore = args[0] if args else kwargs.get("ignore_callbacks", no_ignore)
                compression = compression_name(compilation_cache)
                adapter.remember_key_args(
                    key, (module, devices, compile_options, backend, ignore, compression), hashes
                )
            except Exception as exc:
                log.debug("compilecache: could not record key components: %s", exc)
            return key

        return get_cache_key

    # The directory only where the program set none: JAX then builds its cache for the marker.
    installed.saved_dir = jax_value(DIR_OPTION)
    if not installed.saved_dir:
        try:
            jax.config.update(DIR_OPTION, MARKER_DIR)
            installed.set_dir = True
        except (AttributeError, ValueError) as exc:
            log.debug("compilecache: %s not set: %s", DIR_OPTION, exc)
    patches = installed.patches
    # From here on, what the program sets in code is known to be its own.
    patches.wrap(jax.config, "update", installed.settings.watch, label="jax.config.update")
    patches.wrap(compilation_cache, "get_file_cache", get_file_cache)
    patches.wrap(compilation_cache, "get_cache_key", get_cache_key)
    tap_key_steps(patches, tap)
    PASSES.install(patches, getattr(_private("jax._src.lib"), "_xla", None))
    installed.preloader = _read_ahead(cache, installed)
    # Drop any cache JAX initialised earlier so that the next compile builds ours.
    compilation_cache.reset_cache()
    installed.writers = cfg.writers  # COMPILECACHE_WRITERS: all, or first
    _installed = installed
    installed.watches_writes = _watch_cache_writes(installed)
    installed.xla = _route_xla_caches(cache, installed, cfg)
    _release_leases_after_compiles(cache, installed)
    installed.traces = _keep_traces(cache, installed, cfg)
    log.info("compilecache: JAX %s routed through %s", jax.__version__, cache.store.url)
    return True


def _read_ahead(cache: Cache, installed: _Installed) -> jax_preload.Preloader | None:
    """Serve JAX's lookups from executables deserialised ahead (preload.py), started once
    the program's backends exist; record how each miss is compiled, for the entry it writes.
    ``None`` where the session reads no manifest or this JAX lacks the functions."""
    compilation_cache = _private("jax._src.compilation_cache")
    xla_bridge = _private("jax._src.xla_bridge")
    needed = ("get_executable_and_time", "decompress_executable", "extract_executable_and_time")
    if cache.prefetcher is None or not all(hasattr(compilation_cache, n) for n in needed):
        return None
    if not callable(getattr(xla_bridge, "backends", None)):
        return None
    if positional(compilation_cache.get_executable_and_time) != 4:
        return None  # before JAX passed the executable's devices (0.4.x): JAX's own path
    adapter = installed.adapter

    def wanted() -> bool:
        # Only for a cache JAX reads: not turned off, and not checking its contents (the check
        # compares a fresh compile's bytes with the stored ones, and XLA names what it compiles
        # after what the process loaded before: a deserialisation beside it changes them).
        flag = getattr(_private("jax._src.config"), "compilation_cache_check_contents", None)
        return bool(jax_value(ENABLE_OPTION)) and not (flag is not None and bool(flag.value))

    preloader = jax_preload.Preloader(cache, FRAMEWORK, store_key, wanted)
    cache.finishers.append(preloader.finish)

    def ours(backend: Any) -> bool:
        # JAX's cache for this backend is compilecache's, and reads as a cache: a disabled
        # cache, another one, or jax_compilation_cache_check_contents get nothing read ahead.
        get_cache = getattr(compilation_cache, "_get_cache", None)
        return (
            get_cache is not None and get_cache(backend) is adapter and not adapter.check_contents
        )

    def get_executable_and_time(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_executable_and_time(
            cache_key: str, compile_options: Any, backend: Any, executable_devices: Any
        ) -> Any:
            try:
                preloader.start()  # the backends exist by now, whatever the program did
                if ours(backend):
                    loaded = preloader.claim(
                        cache_key, compile_options, backend, executable_devices
                    )
                    if loaded is not None:
                        adapter.served(cache_key)
                        return loaded
            except Exception as exc:  # never raise into JAX: its own path reads
                log.debug("compilecache: read-ahead of %s not used: %s", cache_key, exc)
            found = original(cache_key, compile_options, backend, executable_devices)
            try:
                if found[0] is None:  # a miss: JAX compiles with these, and its entry says so
                    how = jax_preload.how_compiled(compile_options, executable_devices, backend)
                    if how:
                        adapter.remember_how_compiled(cache_key, how)
            except Exception as exc:
                log.debug("compilecache: how %s is compiled not recorded: %s", cache_key, exc)
            return found

        return get_executable_and_time

    def backends(original: Callable[[], Any]) -> Callable[[], Any]:
        def backends() -> Any:
            found = original()
            preloader.start()  # once: the program's backends exist (never raises)
            return found

        return backends

    patches = installed.patches
    patches.wrap(compilation_cache, "get_executable_and_time", get_executable_and_time)
    patches.wrap(xla_bridge, "backends", backends)
    initialized = getattr(xla_bridge, "backends_are_initialized", None)
    if callable(initialized) and initialized():
        preloader.start()
    return preloader


def _all_write() -> bool:
    """Whether every process of a multi-process job writes (needs the write watcher)."""
    return _installed is not None and _installed.writers == "all" and _installed.watches_writes


def _watch_cache_writes(installed: _Installed) -> bool:
    """Wrap ``compiler._cache_write`` (looked up at call time) to learn why JAX does not hand a
    compile to ``put`` (host callbacks, the program's minimum compile time or entry size, not
    being process 0), to apply compilecache's minimum compile time where the program left JAX's
    at its default, and to let every process of a multi-process job write
    (COMPILECACHE_WRITERS=all). ``False`` when this JAX lacks these functions (explanations of
    never-stored compiles are then missing, JAX's own gates apply, and only process 0 writes)."""
    adapter, settings = installed.adapter, installed.settings
    try:
        compiler = _private("jax._src.compiler")
        original = compiler._cache_write
        jax_config = _private("jax._src.config")
        distributed = _private("jax._src.distributed")
        # What _cache_write calls past its gates, when compilecache's gates differ from JAX's.
        put = _private("jax._src.compilation_cache").put_executable_and_time
    except (ImportError, AttributeError) as exc:
        log.debug("compilecache: JAX cache writes not watched: %s", exc)
        return False
    should_raise = getattr(compiler, "_should_raise_persistent_cache_error", None)

    def skip_reason(compile_time: float, host_callbacks: Any) -> str:
        process = getattr(distributed.global_state, "process_id", 0)
        if process and not _all_write():
            return (
                f"JAX writes only from process 0 (this is process {process}; "
                "COMPILECACHE_WRITERS=first)"
            )
        if host_callbacks:
            return (
                "it uses host callbacks (jax.debug.print, jax.pure_callback, io_callback): "
                "JAX never stores those"
            )
        minimum = settings.min_compile_time()
        if minimum is not None and compile_time < minimum:
            return f"compiled in {compile_time:.2f}s, below {MIN_TIME_OPTION}={minimum:g} (set by the program)"
        return ""

    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def write(given: dict[str, Any], seconds: float) -> None:
        """JAX's write past its gates (compilecache's gates, already applied, differ)."""
        try:
            put(
                given["cache_key"],
                given["module_name"],
                given["executable"],
                given["backend"],
                int(seconds),
            )
        except Exception as exc:
            if should_raise is not None and should_raise(exc):
                raise  # what JAX raises from its own write (a check_contents mismatch)
            adapter.cache.warn_once("jax:put", f"write failed: {exc}")

    def cache_write(*args: Any, **kwargs: Any) -> Any:
        # Read the arguments by name: the signature changes between releases (JAX 0.11 dropped
        # ``host_callbacks``); anything unexpected goes to JAX's own function unexamined.
        try:
            given = _write_arguments(signature, args, kwargs)
            cache_key = given["cache_key"]
            seconds = as_seconds(given["compile_time_secs"])  # may be a numpy scalar
            host_callbacks = given.get("host_callbacks", ())
        except Exception as exc:
            log.debug("compilecache: JAX cache write not examined: %s", exc)
            return original(*args, **kwargs)
        try:
            reason = skip_reason(seconds, host_callbacks)
        except Exception as exc:
            log.debug("compilecache: could not check a JAX cache write: %s", exc)
            return original(*args, **kwargs)
        if reason:
            adapter.not_written(cache_key, reason, seconds)
            return original(*args, **kwargs)  # JAX skips it too, logging as it does
        process = getattr(distributed.global_state, "process_id", 0)
        jax_minimum = float(jax_config.persistent_cache_min_compile_time_secs.value)
        # JAX's gate (process_id != 0: return) exists because its file cache was unsafe under
        # concurrent writers; our stores publish atomically and leases keep one compile per
        # key, so another process's entry (its keys differ from process 0's: the topology
        # fingerprint follows the process) is written as process 0's would be. And a program
        # that left JAX's minimum compile time at its default gets compilecache's.
        if process or seconds < jax_minimum:
            write(given, seconds)
            result = None
        else:
            result = original(*args, **kwargs)
        minimum_size = int(jax_config.persistent_cache_min_entry_size_bytes.value)
        if minimum_size > 0 and adapter.awaiting_write(cache_key):
            adapter.not_written(
                cache_key,
                f"its entry is smaller than {MIN_SIZE_OPTION}={minimum_size} (set by the program)",
                seconds,
            )
        return result

    installed.patches.replace(compiler, "_cache_write", cache_write, label="jax._cache_write")
    return True


_WRITE_ARGUMENTS = (
    "cache_key",
    "compile_time_secs",
    "module_name",
    "backend",
    "executable",
    "host_callbacks",  # up to JAX 0.10
)


def _write_arguments(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The arguments of a ``_cache_write`` call by name: bound to its signature, or in JAX's
    order when it takes ``*args``. Raises when they cannot be read."""
    given: dict[str, Any] = {}
    if signature is not None:
        given = dict(signature.bind(*args, **kwargs).arguments)
    if "cache_key" not in given:
        given = {**dict(zip(_WRITE_ARGUMENTS, args, strict=False)), **kwargs}
    return given


def _route_xla_caches(cache: Cache, installed: _Installed, cfg: Config) -> jax_xla.XlaCaches | None:
    """Give XLA's caches this host's directories and carry the autotune results (xla.py).
    ``None`` (XLA then gets no cache directories) when this JAX has no place to do it."""
    try:
        compiler = _private("jax._src.compiler")
        caches = jax_xla.XlaCaches(
            cache, MARKER_DIR, _writes_here, cfg, roots=lambda: str(jax_value(DIR_OPTION) or "")
        )
        installed.patches.wrap(
            compiler,
            "get_compile_options",
            lambda original: jax_xla.wrap_get_compile_options(original, caches),
        )
    except Exception as exc:
        log.debug("compilecache: XLA's caches not routed: %s", exc)
        return None
    caches.start()
    cache.finishers.append(caches.finish)
    return caches


def _release_leases_after_compiles(cache: Cache, installed: _Installed) -> None:
    """Wrap ``compiler.compile_or_get_cached`` (looked up at call time by pxla) so that a
    single-flight lease taken by a miss is released when the compile is over, also when JAX
    never calls ``put`` (host callbacks, its own minimum compile time, not process 0) or the
    compile raises: waiting processes then stop waiting at once; and to say once when the
    program's own settings turned JAX's cache off. Without this function (another JAX) leases
    expire after their TTL."""
    xla = installed.xla
    notes = installed.notes

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            try:
                for note in settings_notes(installed.settings):
                    notes.note(note)
                return original(*args, **kwargs)
            finally:
                cache.finish_thread_leads()
                if xla is not None:
                    xla.after_compile()

        return compile_or_get_cached

    try:
        compiler = _private("jax._src.compiler")
        installed.patches.wrap(compiler, "compile_or_get_cached", wrap)
    except (ImportError, AttributeError) as exc:
        log.debug("compilecache: JAX compiles not watched: %s", exc)


def _hide_frames() -> None:
    """compilecache's frames are JAX's for JAX: left out of the source locations a trace records
    (they reach the executable's metadata: a compile under compilecache's wrappers would differ
    from JAX's own, byte for byte) and of the tracebacks JAX shows. Never raises."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for module in ("jax._src.source_info_util", "jax._src.traceback_util"):
        try:
            _private(module).register_exclusion(package + os.sep)
        except Exception as exc:
            log.debug("compilecache: frames not hidden from %s: %s", module, exc)


def traces_wanted(version: str, setting: bool | None) -> bool | None:
    """Whether a session serves and records guarded traces on JAX ``version``, given
    COMPILECACHE_JAX_PRECOMPILE (``setting``: None unset, True ``1``, False ``0``): True on a
    release they were tested on unless turned off, None where asked for on another release
    (served, and said once), False otherwise."""
    if setting is False:
        return False
    if version.startswith(jax_traces.TESTED_RELEASES):
        return True
    return None if setting else False


def _keep_traces(cache: Cache, installed: _Installed, cfg: Config) -> jax_traces.TraceCache | None:
    """Serve and record guarded traces (traces.py) where the session wants them: on by default
    for the JAX releases they were tested on (COMPILECACHE_JAX_PRECOMPILE=0 turns them off);
    asked for with COMPILECACHE_JAX_PRECOMPILE=1 on another release, served and said once."""
    version = str(_private("jax").__version__)
    wanted = traces_wanted(version, cfg.jax_precompile)
    if wanted is False:
        return None
    if wanted is None:
        cache.warn_once(
            "jax:traces",
            f"JAX {version} is not a release stored traces were tested on "
            f"({', '.join(jax_traces.TESTED_RELEASES)}x); they are served as asked",
        )
    traces = jax_traces.TraceCache(cache, installed.adapter)
    return traces if traces.install(installed.patches) else None


def _writes_here() -> bool:
    """Whether this process's compiles reach ``put``: every process's do (COMPILECACHE_WRITERS=all),
    or only process 0's (``first``), and then the others must never hold a lease that others
    would wait on."""
    if _all_write():
        return True
    try:
        state = _private("jax._src.distributed").global_state
        return not getattr(state, "process_id", 0)
    except Exception:
        return True


def uninstall() -> None:
    """Restore JAX's functions and its cache directory option."""
    global _installed
    if _installed is None:
        return
    installed, _installed = _installed, None
    installed.patches.undo()
    if installed.preloader is not None:
        installed.preloader.stop()
    if installed.set_dir and jax_value(DIR_OPTION) == MARKER_DIR:
        try:
            _private("jax").config.update(DIR_OPTION, installed.saved_dir)
        except (AttributeError, ValueError) as exc:
            log.debug("compilecache: %s not restored: %s", DIR_OPTION, exc)
    _private("jax._src.compilation_cache").reset_cache()


def active_adapter() -> JaxCacheAdapter | None:
    return _installed.adapter if _installed is not None else None


def program_min_compile_time() -> float | None:
    """The program's own ``jax_persistent_cache_min_compile_time_secs`` (``None``: JAX's default
    left, or JAX not hooked)."""
    installed = _installed
    return installed.settings.min_compile_time() if installed is not None else None


def settings_in_effect() -> dict[str, Any]:
    """What the program set of JAX's cache options, for doctor and ``check`` (empty when JAX is
    not hooked)."""
    installed = _installed
    if installed is None:
        return {}
    return {
        name: jax_value(name)
        for name in (ENABLE_OPTION, DIR_OPTION, MIN_TIME_OPTION, MIN_SIZE_OPTION)
        if installed.settings.set_by_program(name)
        or (name == DIR_OPTION and jax_value(name) != MARKER_DIR)
    }
