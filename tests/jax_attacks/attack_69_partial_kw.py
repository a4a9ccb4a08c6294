SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, functools, jax, jax.numpy as jnp, numpy as np
def g(x, k):
    return x * k
f = jax.jit(functools.partial(g, k=float(os.environ["K"])))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
