SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
jnp.MY_SCALE = float(os.environ["K"])    # an attribute put on a library module
@jax.jit
def f(x):
    return x * jnp.MY_SCALE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
