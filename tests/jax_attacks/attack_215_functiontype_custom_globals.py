SPEC = {"variants": {"a": {"args": ["2"]}, "b": {"args": ["3"]}}, "order": "abba"}
# function rebuilt with a private globals dict; module-level K is the same in both runs
import sys, types
import numpy as np, jax, jax.numpy as jnp
K = 2.0
def g(x):
    return x * K
g2 = types.FunctionType(g.__code__, {**globals(), "K": float(sys.argv[1])}, "g")
f = jax.jit(g2)
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
