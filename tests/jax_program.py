"""A small JAX program the tests run in fresh processes.

Usage: python jax_program.py MODE   (MODE: before | after | plain | child)
  before: compilecache.enable() before `import jax`
  after:  compilecache.enable() after `import jax`, before the first compile
  plain:  no code change (for `compilecache run`)
  child:  like plain, and also runs itself in a child Python process
Prints one JSON line: results and this process's compilecache counters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else "plain"

if mode == "before":
    import compilecache

    compilecache.enable()

import jax  # noqa: E402  (after enable() on purpose: the "before" mode)
import jax.numpy as jnp  # noqa: E402

if mode == "after":
    import compilecache

    compilecache.enable()


@jax.jit
def step(w: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w).sum() + jnp.sin(w).mean()


@jax.jit
def other(x: jax.Array) -> jax.Array:
    return jnp.cumsum(x * 3.0) - x.max()


w = jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64) / 4096.0
x = jnp.linspace(-1.0, 1.0, 32 * 64, dtype=jnp.float32).reshape(32, 64)
grad = jax.jit(jax.grad(lambda w: step(w, x)))(w)
result = {
    "step": float(step(w, x)),
    "other": [float(v) for v in other(x[0])[:4]],
    "grad_sum": float(grad.sum()),
}
if mode == "child":
    child = subprocess.run(
        [sys.executable, __file__, "plain"], capture_output=True, text=True, check=True
    )
    result["child"] = json.loads(child.stdout.strip().splitlines()[-1])

session = None
try:
    import compilecache

    session = compilecache.active()
except ImportError:
    pass
result["stats"] = session.stats() if session is not None else None
result["jax_cache_dir_env"] = os.environ.get("JAX_COMPILATION_CACHE_DIR")
print(json.dumps(result))
