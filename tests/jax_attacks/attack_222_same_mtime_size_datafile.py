SPEC = {"variants": {"a": {"files": {"data.txt": "2.0"}, "mtime": {"data.txt": 1600000000}}, "b": {"files": {"data.txt": "3.0"}, "mtime": {"data.txt": 1600000000}}}, "order": "abba"}
# data file read in the trace, edited keeping the same size and mtime
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    with open("data.txt") as fh:
        return x * float(fh.read())
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
