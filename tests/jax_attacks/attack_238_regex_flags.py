SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# compiled patterns with the same text, different flags
import sys, re
import numpy as np, jax, jax.numpy as jnp
P = re.compile("ab") if sys.argv[1] == "0" else re.compile("ab", re.I)
@jax.jit
def f(x):
    return x + (10.0 if P.match("AB") else 1.0)
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
