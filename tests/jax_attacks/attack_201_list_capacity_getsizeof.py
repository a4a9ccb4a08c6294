SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# equal lists with different over-allocation: sys.getsizeof differs
import sys
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "0":
    L = [0] * 3
else:
    L = []
    for _ in range(10):
        L.append(0)
    del L[3:]
@jax.jit
def f(x):
    return x + L.__sizeof__()
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
