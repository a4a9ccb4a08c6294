SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
IT = iter([2.0, 3.0])
if os.environ["K"] == "3":
    next(IT)
@jax.jit
def f(x):
    return x * next(IT)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
