SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# equal ChainMaps iterate in different orders
import sys
from collections import ChainMap
import numpy as np, jax, jax.numpy as jnp
m1, m2 = {"a": 1}, {"b": 2}
CM = ChainMap(m1, m2) if sys.argv[1] == "0" else ChainMap(m2, m1)
@jax.jit
def f(x):
    return x * CM[next(iter(CM))]
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
