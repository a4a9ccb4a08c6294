SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
K = float(os.environ["K"])
def f(x, k=K, *, j=K + 1):
    return x * k + j
f = jax.jit(f)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
