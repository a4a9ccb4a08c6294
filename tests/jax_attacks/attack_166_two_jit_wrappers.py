SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# two jax.jit wrappers of one function, with a global changed in between
import os, jax, jax.numpy as jnp, numpy as np
K = float(os.environ["K"])
def g(x):
    return x * K
f1 = jax.jit(g)
print("RESULT 1", repr(np.asarray(f1(jnp.arange(3.0))).tolist()))
K = 10.0
f2 = jax.jit(g)
print("RESULT 2", repr(np.asarray(f2(jnp.arange(3.0))).tolist()))
