"""A JAX program that sets JAX's own cache options, for ``tests/test_jax_settings.py``.

Usage: python jax_settings_program.py WHEN SETTINGS_JSON
  WHEN: ``env``   the settings are in the environment (JAX_* variables); nothing set in code
        ``before`` set in code, then ``compilecache.enable()``
        ``after``  ``compilecache.enable()``, then set in code (before the first compile)
        ``run``    set in code under ``compilecache run`` (its bootstrap enabled compilecache)
  SETTINGS: {jax option: value}; ``set_cache_dir`` calls JAX's ``set_cache_dir(value)``,
  ``reset_cache`` its ``reset_cache()``, and
  ``snippet`` runs one of the seeds' own snippets: ``jax-docs`` (the quick start of JAX's cache
  documentation) or ``training-pr`` (``_enable_persistent_compilation_cache``).
Prints one JSON line: the results, the directory XLA's autotune cache was given and this
process's compilecache counters.
"""

from __future__ import annotations

import json
import sys
from typing import Any

when, settings = sys.argv[1], json.loads(sys.argv[2])

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def jax_docs_quick_start(cache_dir: str) -> None:
    """The quick start of JAX's persistent compilation cache documentation."""
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update(
        "jax_persistent_cache_enable_xla_caches", "xla_gpu_per_fusion_autotune_cache_dir"
    )


def _enable_persistent_compilation_cache(cache_dir: str) -> None:
    """As the multi-host training PR does it, after ``jax.distributed.initialize()``."""
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 60)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def apply(settings: dict[str, Any]) -> None:
    for name, value in settings.items():
        if name == "set_cache_dir":
            from jax.experimental.compilation_cache import compilation_cache

            compilation_cache.set_cache_dir(value)
        elif name == "reset_cache":
            from jax.experimental.compilation_cache import compilation_cache

            compilation_cache.reset_cache()
        elif name == "snippet":
            kind, directory = value
            if kind == "jax-docs":
                jax_docs_quick_start(directory)
            else:
                _enable_persistent_compilation_cache(directory)
        else:
            jax.config.update(name, value)


if when == "before":
    apply(settings)
    import compilecache

    compilecache.enable()
elif when == "after":
    import compilecache

    compilecache.enable()
    apply(settings)
elif when == "run":
    apply(settings)


@jax.jit
def step(w: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w).sum() + jnp.sin(w).mean()


@jax.jit
def other(x: jax.Array) -> jax.Array:
    return jnp.cumsum(x * 3.0) - x.max()


w = jnp.arange(32 * 32, dtype=jnp.float32).reshape(32, 32) / 1024.0
x = jnp.linspace(-1.0, 1.0, 8 * 32, dtype=jnp.float32).reshape(8, 32)
result: dict[str, Any] = {"step": float(step(w, x)), "other": float(other(x[0]).sum())}
# What a compile's options give XLA's autotune cache ("" when JAX keeps no XLA cache).
options = jax._src.compiler.get_compile_options(1, 1)
debug = options.executable_build_options.debug_options
result["xla_autotune_dir"] = str(debug.xla_gpu_per_fusion_autotune_cache_dir)
try:
    import compilecache

    session = compilecache.active()
    result["stats"] = session.stats() if session is not None else None
except ImportError:
    result["stats"] = None
print(json.dumps(result))
