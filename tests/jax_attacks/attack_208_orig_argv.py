SPEC = {"variants": {"a": {"args": ["2"]}, "b": {"args": ["3"]}}, "order": "abba"}
# orig_argv instead of sys.argv
import sys
from sys import orig_argv
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    return x * float(orig_argv[-1])
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
