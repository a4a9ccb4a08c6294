SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, functools, jax, jax.numpy as jnp, numpy as np
@functools.lru_cache(maxsize=None)
def get_k():
    return float(os.environ["K"])
get_k()          # warmed before the trace: inside the trace it is a C-level cache hit
@jax.jit
def f(x):
    return x * get_k()
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
