SPEC = {"variants": {"a": {"files": {"data.txt": "2"}, "mtime": {"data.txt": 1600000000}}, "b": {"files": {"data.txt": "3"}, "mtime": {"data.txt": 1600000000}}}, "order": "abba"}
# mmap of a file made before the trace; trace indexes the mapping
import mmap
import numpy as np, jax, jax.numpy as jnp
with open("data.txt", "rb") as fh:
    MM = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
@jax.jit
def f(x):
    return x * float(MM[:1])
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
