SPEC = {"variants": {"a": {"args": ["2"]}, "b": {"args": ["3"]}}}
import sys, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(sys.argv[1])
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
