SPEC = {"variants": {"a": {"files": {"venvx/lib/python3.11/site-packages/libk52.py": "def g(x):\n    return x * 2.0\n"}, "mtime": {"venvx/lib/python3.11/site-packages/libk52.py": 1700000000}},
                     "b": {"files": {"venvx/lib/python3.11/site-packages/libk52.py": "def g(x):\n    return x * 3.0\n"}, "mtime": {"venvx/lib/python3.11/site-packages/libk52.py": 1700000000}}}}
# a "library" module (under a site-packages directory) edited in place between runs
import os, sys
sys.path.insert(0, os.path.abspath("venvx/lib/python3.11/site-packages"))
import jax, jax.numpy as jnp, numpy as np
import libk52
@jax.jit
def f(x):
    return libk52.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
