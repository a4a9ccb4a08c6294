SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# callee's code object has its global names swapped at run time (same source text)
import sys
import numpy as np, jax, jax.numpy as jnp
A = 2.0
B = 3.0
def scale():
    return A
if sys.argv[1] == "1":
    scale.__code__ = scale.__code__.replace(co_names=tuple("B" if n == "A" else n for n in scale.__code__.co_names))
@jax.jit
def f(x):
    return x * scale()
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
