"""Triton's own cache through the store, at Triton's plug point ``knobs.cache.manager_class``.

Triton looks a compiled kernel up by a key of its own (its version and compiler sources, the
kernel's source, the target with its ``ptxas`` version, the options and the environment variables
that change code: ``triton.runtime.cache.get_cache_key``) in a directory, ``~/.triton/cache``.
Every caller goes through a cache manager made for that key: ``triton.compile`` (user kernels,
Inductor's compile workers, libraries' kernels) reads and writes a *group* of files (the cubin,
its metadata JSON, the IRs), the autotuner one ``<fn>.autotune.json`` of timings
(``cache_results=True`` or ``TRITON_CACHE_AUTOTUNING=1``), the launcher build one ``.so``.

:class:`StoreCacheManager` is installed as the manager class when Triton is imported. It keeps
the manager that was configured before (``TRITON_CACHE_MANAGER``, by default Triton's file cache)
as the local copy Triton reads its files from, and puts the store behind it:

- a group or file the local directory lacks is looked up in the store (``triton/kernel/...``,
  ``triton/autotune/...``, ``triton/file/...``); a hit is written into the local directory through
  the chained manager, so Triton loads it exactly as its own;
- what Triton writes after a miss is saved to the store as one entry per group or file;
- the override and dump managers (``TRITON_KERNEL_OVERRIDE``, ``TRITON_KERNEL_DUMP``) are the
  chained manager, untouched.

The store key is Triton's key (the manager's key) with the file's name; a launcher ``.so`` also
takes the Python version, the machine and the C library, which Triton's key leaves to its
directory being local. A hit must also name itself: the metadata Triton wrote holds the hash of
the key it was compiled under, checked against the manager's. Misses are explained from the parts
of Triton's key, recorded as ``get_cache_key`` computes them (``triton``, ``source``,
``backend``, ``options``, ``env``). Counters: ``triton.hits``/``misses``/``writes``, and
``triton.local_hits`` for what Triton's own directory already held.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from compilecache.config import Config
from compilecache.frameworks.torch import switches as torch_switches
from compilecache.frameworks.triton import words as triton_words
from compilecache.host import framework_module as _private
from compilecache.host import python_version
from compilecache.patches import Patches
from compilecache.runtime import fileset
from compilecache.runtime.cache import Cache
from compilecache.runtime.dircache import DirectoryCache, DirKey
from compilecache.runtime.keys import text_digest

log = logging.getLogger("compilecache")

FRAMEWORK = triton_words.FRAMEWORK  # importing it registers the vocabulary
KERNEL, AUTOTUNE, FILE = "kernel", "autotune", "file"
KEY_VERSION = "compilecache-triton-v1"
AUTOTUNE_SUFFIX = ".autotune.json"
# Readable values longer than this are cut (the options of a kernel run to a few hundred chars).
_MAX_READABLE = 2000

_cache: Cache | None = None
_inner: Any = None  # the manager class configured before compilecache (chained to)
_patches = Patches()  # Triton's manager knob and its get_cache_key, undone by uninstall()
_pending = threading.local()  # get_cache_key's last key and arguments on this thread


def layer_of(filename: str) -> str:
    """``autotune`` for the autotuner's timings, ``file`` for any other single file."""
    return AUTOTUNE if filename.endswith(AUTOTUNE_SUFFIX) else FILE


def host_parts(layer: str) -> dict[str, str]:
    """What a file built on this host also depends on beyond Triton's key: a launcher ``.so``
    is built by the host's C compiler against this Python and C library."""
    if layer != FILE:
        return {}
    return {
        "python": python_version(),
        "machine": platform.machine(),
        "libc": " ".join(platform.libc_ver()),
    }


def store_digest(layer: str, manager_key: str, filename: str) -> str:
    """The digest that names ``filename`` under Triton's key ``manager_key`` in the store."""
    h = hashlib.sha256(f"{KEY_VERSION}\0{layer}\0{manager_key}\0{filename}".encode())
    for name, value in sorted(host_parts(layer).items()):
        h.update(f"\0{name}={value}".encode())
    return h.hexdigest()


def store_key(layer: str, manager_key: str, filename: str) -> str:
    """The store key of ``filename`` under Triton's key ``manager_key``."""
    return f"{FRAMEWORK}/{layer}/{store_digest(layer, manager_key, filename)}"


def key_of_hash(hex_hash: str) -> str:
    """Triton's manager key of a SHA-256 hex digest (``runtime.cache._base32``)."""
    import base64

    return base64.b32encode(bytes.fromhex(hex_hash)).decode().rstrip("=")


def key_parts(
    src: Any, backend: Any, options: Any, env_vars: Any
) -> tuple[dict[str, str], dict[str, str]]:
    """(components, readable) of one ``get_cache_key`` call: hashes of what Triton hashes."""
    runtime_cache = _private("triton.runtime.cache")
    triton = _private("triton")
    backend_hash = str(backend.hash())
    env = str(sorted(dict(env_vars).items()))
    option_values = getattr(options, "__dict__", {})
    flags = " ".join(f"--{k}={v}".replace(" ", "") for k, v in sorted(option_values.items()))
    components = {
        "triton": text_digest(str(runtime_cache.triton_key())),
        "source": str(src.hash()),
        "backend": text_digest(backend_hash),
        "options": str(options.hash()),
        "env": text_digest(env),
    }
    readable = {
        # The version Triton's key starts with (runtime.cache's own import of it).
        "triton": str(getattr(runtime_cache, "__version__", triton.__version__)),
        "backend": _target_words(backend, backend_hash),
        "options": flags[:_MAX_READABLE],
        "env": env[:_MAX_READABLE],
        "name": str(getattr(src, "name", "")),
    }
    return components, readable


def _target_words(backend: Any, backend_hash: str) -> str:
    """``cuda 90, ptxas 12.8``: the target and the assembler release its code came from."""
    target = getattr(backend, "target", None)
    words = f"{getattr(target, 'backend', '?')} {getattr(target, 'arch', '?')}"
    release = re.search(r"release ([0-9][^,\s]*)", backend_hash)
    return f"{words}, ptxas {release.group(1)}" if release else words


def _take_key_arguments(manager_key: str) -> tuple[Any, ...] | None:
    """The arguments ``get_cache_key`` last made ``manager_key`` from on this thread (``None``
    when its last key is another one)."""
    pending = getattr(_pending, "value", None)
    _pending.value = None
    if pending is not None and key_of_hash(text_digest(pending[0])) == manager_key:
        return tuple(pending[1])
    return None


def _tee_get_cache_key(original: Callable[..., str]) -> Callable[..., str]:
    def get_cache_key(src: Any, backend: Any, backend_options: Any, env_vars: Any) -> str:
        key = original(src, backend, backend_options, env_vars)
        # Only remembered: the parts are hashed after a miss (key_parts), not on every compile.
        _pending.value = (key, (src, backend, backend_options, env_vars))
        return key

    get_cache_key.__wrapped__ = original  # type: ignore[attr-defined]
    return get_cache_key


def _triton_base() -> type:
    return _private("triton.runtime.cache").CacheManager  # type: ignore[no-any-return]


class StoreCacheManager(_triton_base()):  # type: ignore[misc]
    """Triton's cache manager interface over the chained manager and the store."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        inner_class = _inner or _private("triton.runtime.cache").FileCacheManager
        self.inner = inner_class(key, override=override, dump=dump)
        # torch's switches that turn its caches off (force_disable_caches, fresh_cache) turn
        # off Triton's store for the kernels compiled meanwhile: torch makes their directory
        # fresh too.
        off = override or dump or bool(torch_switches.torch_off())
        self.cache = None if off else _cache
        self.key_arguments = _take_key_arguments(key) if self.cache else None
        self.grouped = False  # get_group was asked: the files put next belong to a group
        self.missed: dict[str, float] = {}  # name -> when the store missed it

    def __getattr__(self, name: str) -> Any:
        # Callers reach into the file manager's attributes (``cache_dir``); pass them through.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- Triton's interface ---------------------------------------------------------------------

    def get_file(self, filename: str) -> str | None:
        found: str | None = self.inner.get_file(filename)
        if found is not None or self.cache is None or self.grouped:
            if found is not None and self.cache is not None and not self.grouped:
                self.cache.stats.add("local_hits", framework=FRAMEWORK)
            return found
        files = self._fetch(layer_of(filename), filename)
        if files is None or filename not in files:
            self.missed[filename] = time.perf_counter()
            return None
        path: str = self.inner.put(files[filename].data, filename, binary=True)
        return path

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        path: str = self.inner.put(data, filename, binary=binary)
        if self.cache is not None and not self.grouped and filename in self.missed:
            raw = data if isinstance(data, bytes) else str(data).encode()
            name = filename.removesuffix(AUTOTUNE_SUFFIX)
            self._save(layer_of(filename), filename, name, {filename: fileset.File(raw)})
        return path

    def get_group(self, filename: str) -> dict[str, str] | None:
        self.grouped = True
        found: dict[str, str] | None = self.inner.get_group(filename)
        if self.cache is None:
            return found
        if found is not None:
            self.cache.stats.add("local_hits", framework=FRAMEWORK)
            return found
        files = self._fetch(KERNEL, filename)
        if files is None or not self._names_this_key(files.get(filename)):
            self.missed[filename] = time.perf_counter()
            return None
        paths = {name: self.inner.put(f.data, name, binary=True) for name, f in files.items()}
        self.inner.put_group(filename, paths)
        return paths

    def put_group(self, filename: str, group: dict[str, str]) -> Any:
        result = self.inner.put_group(filename, group)
        if self.cache is not None and filename in self.missed:
            try:
                files = {name: fileset.read_file(path) for name, path in group.items()}
            except OSError as exc:
                self.cache.warn_once("triton:put", f"Triton kernel not stored: {exc}")
                return result
            self._save(KERNEL, filename, filename.removesuffix(".json"), files)
        return result

    # -- the store ------------------------------------------------------------------------------

    def _fetch(self, layer: str, filename: str) -> dict[str, fileset.File] | None:
        assert self.cache is not None
        key = store_key(layer, self.key, filename)
        try:
            found = self.cache.load(FRAMEWORK, key)
            return fileset.unpack(found.payload) if found is not None else None
        except fileset.BadFileSet as exc:
            self.cache.warn_once("triton:bad", f"Triton entry {key} unusable ({exc}); compiling")
        except Exception as exc:  # the store is never in the way of a compile
            self.cache.warn_once("triton:get", f"Triton cache read failed, compiling: {exc}")
        return None

    def _names_this_key(self, metadata: fileset.File | None) -> bool:
        """Whether a group's metadata was written under this manager's key (``hash``)."""
        if metadata is None:
            return False
        try:
            recorded = json.loads(metadata.data).get("hash")
        except (ValueError, AttributeError):
            return False
        return recorded is None or key_of_hash(str(recorded)) == self.key

    def _save(self, layer: str, filename: str, name: str, files: dict[str, fileset.File]) -> None:
        cache = self.cache
        assert cache is not None
        elapsed = time.perf_counter() - self.missed.pop(filename, time.perf_counter())
        parts: dict[str, str] = {}
        readable: dict[str, str] = {}
        if self.key_arguments is not None:
            try:
                parts, readable = key_parts(*self.key_arguments)
            except Exception as exc:  # explanations only: the entry is stored without them
                log.debug("compilecache: Triton key parts not recorded: %s", exc)
        components = parts or {"triton key": self.key}
        components.update(host_parts(layer))
        digest = store_digest(layer, self.key, filename)
        key = DirKey(FRAMEWORK, layer, name, digest, components, readable)
        DirectoryCache(cache).save_files(key, files, elapsed=elapsed, versions=versions())


def versions() -> dict[str, str]:
    """What a Triton entry records: Triton's version and Python's."""
    return {"triton": str(_private("triton").__version__), "python": python_version()}


# -- install ----------------------------------------------------------------------------------


def install(cache: Cache, cfg: Config) -> bool:
    """Make :class:`StoreCacheManager` Triton's cache manager, chained to the one configured.
    (``cfg``, the session's configuration, decides nothing here yet.)"""
    global _cache, _inner
    try:
        knobs = _private("triton.knobs")
        compiler = _private("triton.compiler.compiler")
        configured = knobs.cache.manager_class
    except Exception as exc:  # Triton before 3.4 has no knobs; a bad TRITON_CACHE_MANAGER
        cache.warn_once("triton:hook", f"Triton's cache will not be carried: {exc}")
        return False
    if _cache is not None:
        uninstall()
    _inner = configured if configured is not StoreCacheManager else None
    _cache = cache
    # The knob's own value (set in code or from TRITON_CACHE_MANAGER) comes back at uninstall;
    # a knob that had none is deleted again, so that Triton reads its environment as before.
    _patches.replace(
        knobs.cache, "manager_class", StoreCacheManager, label="triton.knobs.cache.manager_class"
    )
    if not hasattr(compiler.get_cache_key, "__wrapped__"):
        _patches.wrap(compiler, "get_cache_key", _tee_get_cache_key)
    log.info("compilecache: Triton %s routed through %s", versions()["triton"], cache.store.url)
    return True


def uninstall() -> None:
    """Give Triton back the manager it had, and its ``get_cache_key``."""
    global _cache, _inner
    if _cache is None:
        return
    _cache = None
    _patches.undo()
    _inner = None


def installed() -> bool:
    return _cache is not None


def hook_status() -> dict[str, bool]:
    """Which of Triton's patched names are still ours (by label)."""
    return _patches.live()


def chained() -> str:
    """The manager Triton reads its files through (for doctor): ``module:Class``."""
    inner = _inner or _private("triton.runtime.cache").FileCacheManager
    return f"{inner.__module__}:{inner.__qualname__}"
