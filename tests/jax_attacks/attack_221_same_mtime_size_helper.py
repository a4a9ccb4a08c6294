SPEC = {"variants": {"a": {"files": {"helper.py": "K = 2.0\n"}, "mtime": {"helper.py": 1600000000}}, "b": {"files": {"helper.py": "K = 3.0\n"}, "mtime": {"helper.py": 1600000000}}}, "order": "abba"}
# helper module edited keeping the same size and mtime
import numpy as np, jax, jax.numpy as jnp
import helper
@jax.jit
def f(x):
    return x * helper.K
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
