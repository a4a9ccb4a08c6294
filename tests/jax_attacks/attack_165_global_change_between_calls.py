SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# plain JAX keeps the first trace after the global changes; the cached run must do the same
import os, jax, jax.numpy as jnp, numpy as np
K = float(os.environ["K"])
@jax.jit
def f(x):
    return x * K
print("RESULT 1", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
K = 10.0
print("RESULT 2", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
