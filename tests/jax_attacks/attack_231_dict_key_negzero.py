SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# {0.0: 1} == {-0.0: 1}; the stored key keeps its sign
import sys
import numpy as np, jax, jax.numpy as jnp
D = {(0.0 if sys.argv[1] == "0" else -0.0): 1}
@jax.jit
def f(x):
    k = next(iter(D))
    return x + (10.0 if str(k).startswith("-") else 1.0)
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
