SPEC = {"variants": {"a": {"files": {"helper11.py": "def g(x):\n    return x * 2.0\n"}, "mtime": {"helper11.py": 1700000000}},
                     "b": {"files": {"helper11.py": "def g(x):\n    return x * 3.0\n"}, "mtime": {"helper11.py": 1700000000}}}}
# helper edited between runs: same size, same mtime
import jax, jax.numpy as jnp, numpy as np
import helper11
@jax.jit
def f(x):
    return helper11.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
