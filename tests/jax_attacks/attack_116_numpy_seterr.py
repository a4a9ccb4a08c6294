SPEC = {"variants": {"a": {"args": ["ignore"]}, "b": {"args": ["raise"]}}}
# numpy's floating-point error state (set from argv) changes control flow in the trace
import sys, jax, jax.numpy as jnp, numpy as np
np.seterr(divide=sys.argv[1])
@jax.jit
def f(x):
    try:
        np.float64(1.0) / np.float64(0.0)
        s = 2.0
    except FloatingPointError:
        s = 3.0
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
