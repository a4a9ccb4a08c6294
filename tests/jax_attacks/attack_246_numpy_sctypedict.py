SPEC = {"variants": {"a": {"args": ["float32"]}, "b": {"args": ["float16"]}}, "order": "abba"}
# numpy dtype name registry (np.sctypeDict) extended by the program; trace resolves the name
import sys
import numpy as np, jax, jax.numpy as jnp
np.sctypeDict["workdtype"] = getattr(np, sys.argv[1])
@jax.jit
def f(x):
    return x.astype(np.dtype("workdtype")) * 3
r = f(np.ones(2, np.float32) / 3)
print("RESULT", str(r.dtype), np.asarray(r, np.float64).tolist())
