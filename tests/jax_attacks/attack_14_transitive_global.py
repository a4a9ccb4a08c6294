SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
K2 = float(os.environ["K"])
def g(x):
    return x * K2
def h(x):
    return g(x) + 1
@jax.jit
def f(x):
    return h(x)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
