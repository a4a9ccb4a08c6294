SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# same source text, code object constants swapped at run time
import sys
import numpy as np, jax, jax.numpy as jnp
def g(x):
    return x * 2.0
if sys.argv[1] == "1":
    g.__code__ = g.__code__.replace(co_consts=tuple(3.0 if c == 2.0 else c for c in g.__code__.co_consts))
f = jax.jit(g)
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
