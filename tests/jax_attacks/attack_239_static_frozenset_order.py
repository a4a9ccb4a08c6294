SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# equal static frozensets, different iteration order (hash collision)
import sys
from functools import partial
import numpy as np, jax, jax.numpy as jnp
@partial(jax.jit, static_argnums=1)
def f(x, s):
    return x * next(iter(s))
s = frozenset([8, 16] if sys.argv[1] == "0" else [16, 8])
print("RESULT", np.asarray(f(np.ones(2, np.float32), s)).tolist())
