SPEC = {"variants": {"a": {"args": ["ignore"]}, "b": {"args": ["error"]}}}
# the program sets a warnings filter from argv before the jit call; the trace's control flow depends on it
import sys, warnings, jax, jax.numpy as jnp, numpy as np
warnings.simplefilter(sys.argv[1], RuntimeWarning)
@jax.jit
def f(x):
    try:
        warnings.warn("w", RuntimeWarning)
        s = 2.0
    except RuntimeWarning:
        s = 3.0
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
