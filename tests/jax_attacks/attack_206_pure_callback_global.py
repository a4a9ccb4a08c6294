SPEC = {"variants": {"a": {"args": ["2"]}, "b": {"args": ["3"]}}, "order": "abba"}
# callback body reads a global at run time; trace itself never reads it
import sys
import numpy as np, jax, jax.numpy as jnp
SCALE = float(sys.argv[1])
class Scaler:
    def __init__(self, s): self.s = s
    def __call__(self, x): return np.asarray(x * self.s, dtype=np.float32)
CB = Scaler(SCALE)
def cb(x):
    return np.asarray(x * SCALE, dtype=np.float32)
@jax.jit
def f(x):
    a = jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    b = jax.pure_callback(CB, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return a + 10 * b
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
