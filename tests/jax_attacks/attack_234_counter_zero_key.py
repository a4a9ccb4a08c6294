SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# Counter(a=1) == Counter(a=1, b=0) (py3.10+), but len differs
import sys
from collections import Counter
import numpy as np, jax, jax.numpy as jnp
C = Counter({"a": 1}) if sys.argv[1] == "0" else Counter({"a": 1, "b": 0})
@jax.jit
def f(x):
    return x + len(C)
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
