"""XLA's GPU sub-caches under compilecache: per-fusion autotuning results, the kernel cache file.

With its persistent cache on, JAX enables XLA's own caches as ``jax_persistent_cache_enable_xla_
caches`` says (default ``xla_gpu_per_fusion_autotune_cache_dir``; also ``xla_gpu_kernel_cache_
file``, ``all``, ``none``): ``compiler.get_compile_options`` sets XLA's debug options to paths
under ``jax_compilation_cache_dir``, and only process 0 may write the autotune results. Those
paths are part of the executable's key (JAX clears the autotune cache *mode* from the key, not
the paths), so with JAX's own cache the key changes with where the cache directory is.

Under compilecache, ``jax_compilation_cache_dir`` is a constant marker that is not a directory,
and this module:

- gives XLA real directories on this host (``$XDG_CACHE_HOME/compilecache-xla``, else
  ``~/.cache/compilecache-xla``) in place of the paths JAX derived from the marker, and lets
  every process update the autotune results (``COMPILECACHE_WRITERS=first`` keeps JAX's
  process-0 rule);
- has the key computed with both paths cleared (:func:`key_options`): an executable's key is the
  same on every host and for every store, and the same as with these caches off;
- carries the autotune directory through the store as a :class:`~compilecache.runtime.dircache.
  SyncedDirectory` (entries ``xla/autotune/...``, the job's list ``xla/autotune-index/...``):
  restored on a background thread from ``enable()``, waited for by the first compile that uses
  it, and published after each compile that added files, and at exit. XLA names each file by the
  fusion, the device description and its cache version, so a restored file is one XLA would have
  written here; on a CPU, XLA does not autotune and the directory stays empty.

The kernel cache file is one file XLA rewrites as it adds kernels: it gets a stable local path,
and is not carried.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from compilecache.config import Config
from compilecache.host import framework_module as _private
from compilecache.host import jax_versions
from compilecache.runtime import manifest
from compilecache.runtime.cache import Cache
from compilecache.runtime.dircache import SyncedDirectory

log = logging.getLogger("compilecache")

FRAMEWORK = "xla"
LAYER = "autotune"
AUTOTUNE_FIELD = "xla_gpu_per_fusion_autotune_cache_dir"
KERNEL_FIELD = "xla_gpu_kernel_cache_file"
MODE_FIELD = "xla_gpu_experimental_autotune_cache_mode"
PATH_FIELDS = (AUTOTUNE_FIELD, KERNEL_FIELD)
# How long the first compile waits for the autotune results to arrive from the store.
RESTORE_WAIT_S = 60.0


def xla_directory(env: Any = None) -> str:
    """This host's directory for XLA's caches (``$XDG_CACHE_HOME/compilecache-xla``)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "compilecache-xla")


def usable_xla_directory(env: Any = None, *, create: bool = True) -> tuple[str, str]:
    """(the directory XLA's caches get on this host, why it is not the usual one or ``""``): a
    read-only home (a container, a cluster's compute node) gets a directory under the system's
    temporary directory instead, so that no process warns about it (``check`` says so).
    ``create=False``: make nothing, only judge whether it could be made (``check``)."""
    preferred = xla_directory(env)
    try:
        if create:
            os.makedirs(preferred, exist_ok=True)
        existing = preferred
        while not os.path.exists(existing):  # the directory that would hold it
            existing = os.path.dirname(existing)
        if os.path.isdir(existing) and os.access(existing, os.W_OK):
            return preferred, ""
        reason = f"{preferred} is not writable"
        if existing != preferred:
            reason = f"{preferred} cannot be made ({existing} is not a writable directory)"
    except OSError as exc:
        reason = f"{preferred} cannot be made ({exc.strerror or exc})"
    fallback = os.path.join(tempfile.gettempdir(), f"compilecache-xla-{os.getuid()}")
    return fallback, reason


def _debug_options(compile_options: Any) -> Any:
    return compile_options.executable_build_options.debug_options


def key_options(compile_options: Any) -> Any:
    """``compile_options`` as the key sees it: XLA's cache paths cleared (a copy when any is
    set; the same object otherwise, at no cost)."""
    try:
        debug = _debug_options(compile_options)
        if not any(getattr(debug, f, "") for f in PATH_FIELDS):
            return compile_options
        cleared = copy.deepcopy(compile_options)
        for field in PATH_FIELDS:
            setattr(_debug_options(cleared), field, "")
        return cleared
    except Exception as exc:  # an options object of another shape: hash it as JAX would
        log.debug("compilecache: XLA cache paths not cleared from the key: %s", exc)
        return compile_options


class XlaCaches:
    """XLA's cache directories for one installed JAX integration."""

    def __init__(
        self,
        cache: Cache,
        marker: str,
        writes_here: Callable[[], bool],
        cfg: Config,
        roots: Callable[[], str] | None = None,
    ) -> None:
        self.cache = cache
        self.marker = marker.rstrip("/")
        # JAX's cache directory now: a program that names its own gets it served from the store
        # (frameworks.jax), and XLA's caches go to this host's directories all the same.
        self.roots = roots or (lambda: "")
        self.writes_here = writes_here
        self.cfg = cfg  # the session's: it names the job whose autotune results are carried
        self.directory, why = usable_xla_directory()
        if why:
            log.info("compilecache: XLA's caches use %s (%s)", self.directory, why)
        self.autotune = SyncedDirectory(
            cache,
            framework=FRAMEWORK,
            layer=LAYER,
            directory=os.path.join(self.directory, "per_fusion_autotune"),
            job="",
        )
        self._restored = threading.Event()
        self._thread: threading.Thread | None = None
        self.used = False  # XLA was given the autotune directory in this process

    def start(self) -> None:
        """Fetch the job's autotune results in the background."""

        def restore() -> None:
            try:
                # Here, not in enable(): naming the job reads the installed versions.
                self.autotune.job = self.autotune.job or manifest.job_name(self.cfg)
                self.autotune.versions = jax_versions()
                count = self.autotune.restore()
                if count:
                    log.info("compilecache: %d XLA autotune results restored", count)
            finally:
                self._restored.set()

        self._thread = threading.Thread(target=restore, name="compilecache-xla", daemon=True)
        self._thread.start()

    def _derived(self, path: str) -> bool:
        """Whether JAX derived ``path`` from its cache directory (the marker, or the program's)."""
        if not path:
            return False
        roots = [self.marker, self.roots().rstrip("/")]
        return any(root and path.startswith(root) for root in roots)

    def options(self, compile_options: Any) -> None:
        """Point the paths JAX derived from its cache directory at this host's directories."""
        debug = _debug_options(compile_options)
        autotune = str(getattr(debug, AUTOTUNE_FIELD, "") or "")
        if self._derived(autotune):
            if not self._restored.wait(RESTORE_WAIT_S):
                log.info("compilecache: XLA autotune results still arriving; compiling on")
            setattr(debug, AUTOTUNE_FIELD, self.autotune.directory)
            if self.writes_here():
                mode = _private("jax._src.lib").xla_client.AutotuneCacheMode.UPDATE
                setattr(debug, MODE_FIELD, mode)
            self.used = True
        kernels = str(getattr(debug, KERNEL_FIELD, "") or "")
        if self._derived(kernels):
            os.makedirs(self.directory, exist_ok=True)
            setattr(debug, KERNEL_FIELD, os.path.join(self.directory, "kernel_cache_file"))

    def unset(self, compile_options: Any) -> None:
        """Clear every path JAX derived from the marker (XLA then keeps no cache). Never raises."""
        try:
            debug = _debug_options(compile_options)
            for field in PATH_FIELDS:
                if self._derived(str(getattr(debug, field, "") or "")):
                    setattr(debug, field, "")
        except Exception as exc:
            log.debug("compilecache: XLA cache paths not cleared: %s", exc)

    def after_compile(self) -> None:
        """Publish the autotune results a compile added (one ``stat`` when it added none)."""
        if self.used and self.autotune.changed():
            self.autotune.publish()

    def finish(self) -> None:
        """At exit: publish what is left (files added since the last compile)."""
        if self._restored.is_set():  # else the job's name and index are not known yet
            self.autotune.publish()


def wrap_get_compile_options(original: Callable[..., Any], caches: XlaCaches) -> Any:
    def get_compile_options(*args: Any, **kwargs: Any) -> Any:
        compile_options = original(*args, **kwargs)
        try:
            caches.options(compile_options)
        except Exception as exc:  # XLA's caches off rather than pointed at the marker
            caches.cache.warn_once("xla:options", f"XLA's cache directories not set: {exc}")
            caches.unset(compile_options)
        return compile_options

    get_compile_options.__wrapped__ = original  # type: ignore[attr-defined]
    return get_compile_options
