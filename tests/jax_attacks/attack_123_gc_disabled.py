SPEC = {"variants": {"a": {"args": ["on"]}, "b": {"args": ["off"]}}}
# gc enabled/disabled from argv; the trace branches on gc.isenabled()
import sys, gc, jax, jax.numpy as jnp, numpy as np
if sys.argv[1] == "off":
    gc.disable()
@jax.jit
def f(x):
    return x * (2.0 if gc.isenabled() else 3.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
