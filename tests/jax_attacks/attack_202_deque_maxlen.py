SPEC = {"variants": {"a": {"args": ["3"]}, "b": {"args": ["5"]}}, "order": "abba"}
# deque items equal, maxlen (C slot) differs
import sys
from collections import deque
import numpy as np, jax, jax.numpy as jnp
D = deque([1, 2, 3], maxlen=int(sys.argv[1]))
@jax.jit
def f(x):
    d = D.copy()
    d.append(10)
    return x * sum(d)
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
