SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# re's module-level pattern cache pre-seeded by the program
import sys, re
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "1":
    re._cache[(str, "ab", 0)] = re.compile("ab", re.I)
@jax.jit
def f(x):
    return x + (10.0 if re.match("ab", "AB") else 1.0)
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
