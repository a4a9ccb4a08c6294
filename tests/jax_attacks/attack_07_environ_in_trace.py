SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(os.environ["K"])
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
