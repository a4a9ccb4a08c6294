SPEC = {"variants": {"a": {"files": {"data.txt": "2"}, "mtime": {"data.txt": 1600000000}}, "b": {"files": {"data.txt": "3"}, "mtime": {"data.txt": 1600000000}}}, "order": "abba"}
# file read inside the trace via os.pread on an int fd opened before the trace
import os
import numpy as np, jax, jax.numpy as jnp
FD = os.open("data.txt", os.O_RDONLY)
@jax.jit
def f(x):
    return x * float(os.pread(FD, 16, 0))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
