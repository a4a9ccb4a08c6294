SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a threading.local attribute set before the jit call
import os, threading, jax, jax.numpy as jnp, numpy as np
TL = threading.local()
TL.scale = float(os.environ["K"])
@jax.jit
def f(x):
    return x * TL.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
