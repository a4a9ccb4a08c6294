"""What the program set of JAX's own cache options (in its environment or in code), read at each
compile, and what compilecache says about them: JAX's switches keep their meaning under
compilecache (``jax_enable_compilation_cache``, the minimum compile time and entry size, a cache
directory the program names, ``jax_compilation_cache_check_contents``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compilecache.host import framework_module as _private

if TYPE_CHECKING:
    from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

DIR_OPTION = "jax_compilation_cache_dir"
MIN_TIME_OPTION = "jax_persistent_cache_min_compile_time_secs"
MIN_SIZE_OPTION = "jax_persistent_cache_min_entry_size_bytes"
ENABLE_OPTION = "jax_enable_compilation_cache"
CHECK_OPTION = "jax_compilation_cache_check_contents"
# JAX's own default minimum compile time: a program that leaves it there gets compilecache's
# (COMPILECACHE_MIN_COMPILE_TIME, applied by the Cache with the true float compile time).
JAX_DEFAULT_MIN_TIME = 1.0
# JAX's defaults of the options whose value says that the program set them.
_JAX_DEFAULTS: dict[str, Any] = {
    MIN_TIME_OPTION: JAX_DEFAULT_MIN_TIME,
    MIN_SIZE_OPTION: 0,
    ENABLE_OPTION: True,
    CHECK_OPTION: False,
}


class ProgramSettings:
    """What the program set of JAX's cache options: in its environment (JAX reads ``JAX_*``
    variables as its defaults) or in code (``jax.config.update``, watched from install on; a
    value other than JAX's default, whenever it was set). Read at each compile."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.updated: set[str] = set()

    def watch(self, original: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
        """A ``jax.config.update`` that remembers which options the program set."""
        updated = self.updated

        def update(name: str, val: Any) -> Any:
            updated.add(name)
            return original(name, val)

        return update

    def set_by_program(self, name: str) -> bool:
        """Whether the program set option ``name``: in code since install, in the environment,
        or (whenever) to a value other than JAX's default."""
        if name in self.updated or name.upper() in self.env:
            return True
        default = _JAX_DEFAULTS.get(name, _UNKNOWN)
        return default is not _UNKNOWN and jax_value(name) != default

    def min_compile_time(self) -> float | None:
        """The program's ``jax_persistent_cache_min_compile_time_secs``; ``None`` when it left
        JAX's default (then compilecache's own minimum applies)."""
        value = jax_value(MIN_TIME_OPTION)
        if value is None or not self.set_by_program(MIN_TIME_OPTION):
            return None
        return float(value)


_UNKNOWN = object()


def jax_value(name: str) -> Any:
    """The current value of JAX's option ``name`` (``None`` when it cannot be read)."""
    try:
        return getattr(_private("jax").config, name)
    except Exception:
        return None


def directory_note(path: str, url: str) -> str:
    return (
        f"the program set {DIR_OPTION}={path}: compilecache serves JAX's cache from its store "
        f"({url}) and leaves that directory alone"
    )


VERIFY_HELPERS = ("CacheVerificationError", "decompress_executable", "extract_executable_and_time")


def check_contents_wanted(cache: Cache) -> bool:
    """Whether ``jax_compilation_cache_check_contents`` is set (read, as JAX reads it, when JAX
    builds its cache) and can be honoured; a warning, once, when it cannot. Never raises."""
    try:
        flag = getattr(_private("jax._src.config"), "compilation_cache_check_contents", None)
        if flag is None or not bool(flag.value):
            return False
        compilation_cache = _private("jax._src.compilation_cache")
        if all(hasattr(compilation_cache, name) for name in VERIFY_HELPERS):
            return True
        cache.warn_once(
            "jax:check-contents",
            "jax_compilation_cache_check_contents is not honoured: this JAX lacks "
            "compilation_cache." + ", ".join(VERIFY_HELPERS),
        )
    except Exception as exc:
        log.debug("compilecache: jax_compilation_cache_check_contents not read: %s", exc)
    return False


def settings_notes(settings: ProgramSettings) -> list[str]:
    """What the program set of JAX's cache options that changes what compilecache does, in
    words (each said once per process: the summary line, ``explain``, ``doctor``)."""
    notes: list[str] = []
    if jax_value(ENABLE_OPTION) is False:
        notes.append(
            f"the program set {ENABLE_OPTION}=False (or JAX_ENABLE_COMPILATION_CACHE=false): "
            "JAX's persistent cache is off, and compilecache's JAX layer with it"
        )
    elif not jax_value(DIR_OPTION):
        notes.append(
            f"the program set {DIR_OPTION} to nothing: JAX keeps no persistent cache, and "
            "compilecache's JAX layer serves nothing"
        )
    minimum = settings.min_compile_time()
    if minimum is not None:
        notes.append(
            f"the program set {MIN_TIME_OPTION}={minimum:g}: compiles faster than that are not "
            "stored (JAX's rule, kept; COMPILECACHE_MIN_COMPILE_TIME applies on top)"
        )
    size = jax_value(MIN_SIZE_OPTION)
    if settings.set_by_program(MIN_SIZE_OPTION) and isinstance(size, int) and size > 0:
        notes.append(
            f"the program set {MIN_SIZE_OPTION}={size}: entries smaller than that are not "
            "stored (JAX's rule, kept)"
        )
    if jax_value(CHECK_OPTION) is True:
        notes.append(
            f"the program set {CHECK_OPTION}=True: the first lookup of "
            "each key in a process compiles again and is compared with the stored entry"
        )
    return notes
