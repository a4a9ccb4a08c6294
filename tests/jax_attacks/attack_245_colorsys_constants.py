SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# stdlib module constant reassigned by the program, read at call time inside colorsys
import sys, colorsys
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "1":
    colorsys.ONE_SIXTH = 0.25
@jax.jit
def f(x):
    return x * colorsys.hls_to_rgb(0.5, 0.5, 0.5)[0]
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
