SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, ctypes, jax, jax.numpy as jnp, numpy as np
C = ctypes.c_double(float(os.environ["K"]))
@jax.jit
def f(x):
    return x * C.value
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
