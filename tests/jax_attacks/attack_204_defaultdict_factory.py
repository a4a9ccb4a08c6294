SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# defaultdict contents equal, default_factory differs
import sys
from collections import defaultdict
import numpy as np, jax, jax.numpy as jnp
D = defaultdict(int if sys.argv[1] == "0" else (lambda: 7), {"a": 1})
@jax.jit
def f(x):
    return x + D.copy()["missing"] + D["a"]
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
