SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
def g(x, k=float(os.environ["K"])):
    return x * k
@jax.jit
def f(x):
    return g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
