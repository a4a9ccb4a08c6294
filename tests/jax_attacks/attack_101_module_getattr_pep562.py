SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"lazy101.py": "_vals = {}\ndef __getattr__(name):\n    return _vals[name]\n"}, "mtime": {"lazy101.py": 1700000000}},
                     "b": {"env": {"K": "3"}, "files": {"lazy101.py": "_vals = {}\ndef __getattr__(name):\n    return _vals[name]\n"}, "mtime": {"lazy101.py": 1700000000}}}}
# module-level __getattr__ serves SCALE out of a private dict the program fills before the jit call
import os, jax, jax.numpy as jnp, numpy as np
import lazy101
lazy101._vals["SCALE"] = float(os.environ["K"])
@jax.jit
def f(x):
    return x * lazy101.SCALE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
