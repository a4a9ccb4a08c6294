SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# equal dicts, different hash-table size (after deletions) -> different __sizeof__
import sys
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "0":
    D = {0: 0, 1: 1}
else:
    D = {i: i for i in range(50)}
    for i in range(2, 50):
        del D[i]
@jax.jit
def f(x):
    return x + D.__sizeof__()
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
