"""JAX integration: route JAX's persistent compilation cache through compilecache.

The hook (jax.md, "two private hooks work", option b): replace
``jax._src.compilation_cache.get_file_cache`` with a factory that returns our adapter, and point
``jax_compilation_cache_dir`` at a constant marker. It survives ``reset_cache()``, works whether we
are installed before or after ``import jax`` (as long as it is before the first compile), and keeps
the cache key independent of where the store lives: the 0.10.x pitfall that writes the cache
directory into every key is neutralised twice, by the constant marker and by setting
``jax_persistent_cache_enable_xla_caches`` to ``none``.

We also wrap ``compilation_cache.get_cache_key`` (looked up at call time by ``compiler.py``) to
remember the arguments of each key, so that after a miss the eight key components can be hashed
one by one and stored with the entry for miss explanations. That costs one extra key computation
per *miss*, after the compile; hits pay nothing.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zstandard

from compilecache.cache import Cache
from compilecache.entry import EntryHeader

log = logging.getLogger("compilecache")

MARKER_DIR = "compilecache://default"
FRAMEWORK = "jax"
# Keys computed but not yet looked up or written; bounded so a long run cannot leak modules.
_MAX_PENDING = 256
_REQUIRED = ("get_file_cache", "get_cache_key", "reset_cache", "_get_cache")
_CONFIG = {
    "jax_enable_compilation_cache": True,
    "jax_compilation_cache_dir": MARKER_DIR,
    # COMPILECACHE_MIN_COMPILE_TIME is applied by the Cache with the true float compile time.
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
    "jax_persistent_cache_enable_xla_caches": "none",
}


def store_key(jax_key: str) -> str:
    return f"jax/{jax_key}"


def module_name(jax_key: str) -> str:
    """``jit_train_step-<sha256>`` -> ``jit_train_step``."""
    return jax_key.rsplit("-", 1)[0]


@dataclass
class _Pending:
    args: tuple[Any, ...] | None = None
    miss_time: float | None = None


class JaxCacheAdapter:
    """Implements JAX's ``CacheInterface`` (``get``/``put``/``_path``) on a :class:`Cache`."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._path = MARKER_DIR
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._lock = threading.Lock()

    def _slot(self, key: str) -> _Pending:
        with self._lock:
            slot = self._pending.get(key)
            if slot is None:
                slot = self._pending[key] = _Pending()
                while len(self._pending) > _MAX_PENDING:
                    self._pending.popitem(last=False)
            return slot

    def remember_key_args(self, key: str, args: tuple[Any, ...]) -> None:
        self._slot(key).args = args

    def get(self, key: str) -> bytes | None:
        try:
            found = self.cache.load(FRAMEWORK, store_key(key))
        except Exception as exc:  # never raise into JAX
            self.cache.warn_once("jax:get", f"lookup failed: {exc}")
            return None
        if found is not None:
            with self._lock:
                self._pending.pop(key, None)
            return found.payload
        self._slot(key).miss_time = time.monotonic()
        return None

    def put(self, key: str, value: bytes) -> None:
        try:
            self._put(key, value)
        except Exception as exc:  # never raise into JAX
            self.cache.warn_once("jax:put", f"write failed: {exc}")

    def _put(self, key: str, value: bytes) -> None:
        with self._lock:
            slot = self._pending.pop(key, _Pending())
        now = time.monotonic()
        compile_time = (
            now - slot.miss_time if slot.miss_time is not None else _stored_compile_time(value)
        )
        components: dict[str, str] = {}
        extra: dict[str, Any] = {}
        if slot.args is not None:
            components, readable, verified = key_components(key, *slot.args)
            extra = {"readable": readable, "components_verified": verified}
        header = EntryHeader(
            framework=FRAMEWORK,
            key=store_key(key),
            name=module_name(key),
            compile_time_s=compile_time,
            versions=_versions(),
            components=components,
            extra=extra,
        )
        # JAX already zstd-compressed the executable: do not compress it twice.
        self.cache.save(header, value, compress=False)


def _stored_compile_time(value: bytes) -> float:
    """JAX's own whole-second compile time, from the 4-byte prefix of the decompressed value."""
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(value)
        return float(int.from_bytes(reader.read(4), "big"))
    except zstandard.ZstdError:
        return 0.0


def _private(name: str) -> Any:
    """A JAX module, typed ``Any``: these are private APIs we guard at install time."""
    return importlib.import_module(name)


def _versions() -> dict[str, str]:
    jax, jaxlib = _private("jax"), _private("jaxlib")
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "python": sys.version.split()[0]}


def key_components(
    key: str,
    module: Any,
    devices: Any,
    compile_options: Any,
    backend: Any,
    ignore_callbacks: Any,
    compression: str,
) -> tuple[dict[str, str], dict[str, str], bool]:
    """Hash each of the eight key components separately, as ``cache_key.get`` does in sequence.

    Returns the per-component hashes, readable values for the small components, and whether the
    components, chained, reproduce ``key`` (a self-check that fails loudly if JAX changes).
    """
    ck = _private("jax._src.cache_key")
    steps: list[tuple[str, Callable[[Any], object]]] = [
        ("computation", lambda h: ck._hash_computation(h, module, ignore_callbacks)),
        ("jax_lib version", lambda h: h.update(ck.jaxlib_version_str.encode("utf-8"))),
        ("backend version", lambda h: ck._hash_platform(h, backend)),
        ("XLA flags", lambda h: ck._hash_xla_flags(h, ck.get_flag_prefixes())),
        (
            "compile_options",
            lambda h: ck._hash_serialized_compile_options(
                h, compile_options, strip_device_assignment=(backend.platform == "gpu")
            ),
        ),
        ("accelerator_config", lambda h: ck._hash_accelerator_config(h, devices)),
        ("compression", lambda h: ck._hash_string(h, compression)),
        ("custom_hook", lambda h: ck._hash_string(h, ck.custom_hook())),
    ]
    running = hashlib.sha256()
    hashes: dict[str, str] = {}
    for name, step in steps:
        fresh = hashlib.sha256()
        step(fresh)
        step(running)
        hashes[name] = fresh.hexdigest()
    verified = key.endswith("-" + running.hexdigest())
    kinds = [str(d.device_kind) for d in devices.flat]
    readable = {
        "jax_lib version": str(ck.jaxlib_version_str),
        "backend version": f"{backend.platform} {backend.platform_version}",
        "XLA flags": " ".join(_xla_flags(ck)),
        "accelerator_config": f"{len(kinds)} x {', '.join(sorted(set(kinds)))}",
        "compression": compression,
        "custom_hook": str(ck.custom_hook())[:500],
    }
    return hashes, readable, verified


def _xla_flags(ck: Any) -> list[str]:
    """The XLA flags that enter the key, as ``cache_key._hash_xla_flags`` selects them."""
    flags: list[str] = []
    for var in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        flags.extend(os.environ.get(var, "").split())
    prefixes = ck.get_flag_prefixes()
    flags.extend(
        a for a in sys.argv if a.startswith("--xla") or any(a.startswith(p) for p in prefixes)
    )
    excluded = set(ck.xla_flags_to_exclude_from_cache_key)
    return [f for f in sorted(flags) if f.split("=")[0] not in excluded]


@dataclass
class _Installed:
    adapter: JaxCacheAdapter
    original_get_file_cache: Any
    original_get_cache_key: Any
    saved_config: dict[str, Any]


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


def install(cache: Cache) -> bool:
    """Route JAX's persistent cache through ``cache``; ``False`` (with one warning) if impossible."""
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
    adapter = JaxCacheAdapter(cache)
    original_factory = compilation_cache.get_file_cache
    original_key = compilation_cache.get_cache_key

    def get_file_cache(path: str) -> tuple[JaxCacheAdapter, str] | None:
        if path == MARKER_DIR:
            return adapter, MARKER_DIR
        result: tuple[JaxCacheAdapter, str] | None = original_factory(path)
        return result

    def get_cache_key(
        module: Any, devices: Any, compile_options: Any, backend: Any, *args: Any, **kwargs: Any
    ) -> str:
        key: str = original_key(module, devices, compile_options, backend, *args, **kwargs)
        try:
            no_ignore = _private("jax._src.cache_key").IgnoreCallbacks.NO
            ignore = args[0] if args else kwargs.get("ignore_callbacks", no_ignore)
            compression = "zstandard" if compilation_cache.zstandard is not None else "zlib"
            if getattr(compilation_cache, "zstd", None) is not None:
                compression = "zstandard"
            adapter.remember_key_args(
                key, (module, devices, compile_options, backend, ignore, compression)
            )
        except Exception as exc:
            log.debug("compilecache: could not record key components: %s", exc)
        return key

    saved: dict[str, Any] = {}
    for name, value in _CONFIG.items():
        try:
            saved[name] = getattr(jax.config, name)
            jax.config.update(name, value)
        except (AttributeError, ValueError) as exc:
            log.debug("compilecache: jax config %s not set: %s", name, exc)
    compilation_cache.get_file_cache = get_file_cache
    compilation_cache.get_cache_key = get_cache_key
    # Drop any cache JAX initialised earlier so that the next compile builds ours.
    compilation_cache.reset_cache()
    _installed = _Installed(adapter, original_factory, original_key, saved)
    log.info("compilecache: JAX %s routed through %s", jax.__version__, cache.store.url)
    return True


def uninstall() -> None:
    """Restore JAX's functions and configuration."""
    global _installed
    if _installed is None:
        return
    jax = _private("jax")
    compilation_cache = _private("jax._src.compilation_cache")

    compilation_cache.get_file_cache = _installed.original_get_file_cache
    compilation_cache.get_cache_key = _installed.original_get_cache_key
    for name, value in _installed.saved_config.items():
        try:
            jax.config.update(name, value)
        except (AttributeError, ValueError) as exc:
            log.debug("compilecache: jax config %s not restored: %s", name, exc)
    compilation_cache.reset_cache()
    _installed = None


def active_adapter() -> JaxCacheAdapter | None:
    return _installed.adapter if _installed is not None else None
