SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
W = jnp.full((3,), float(os.environ["K"]))
@jax.jit
def f(x):
    return x * W
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
