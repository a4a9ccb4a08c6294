SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
np.MY_SCALE = float(os.environ["K"])
@jax.jit
def f(x):
    return x * np.MY_SCALE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
