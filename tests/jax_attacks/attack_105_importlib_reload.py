SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"src105.py": "VALUE = 1.0\n", "derived105.py": "import src105\nSCALE = src105.VALUE * 2\n"}, "mtime": {"src105.py": 1700000000, "derived105.py": 1700000000}},
                     "b": {"env": {"K": "3"}, "files": {"src105.py": "VALUE = 1.0\n", "derived105.py": "import src105\nSCALE = src105.VALUE * 2\n"}, "mtime": {"src105.py": 1700000000, "derived105.py": 1700000000}}}}
# unchanged module files, but the program patches one and reloads the other, recomputing its import-time global
import os, importlib, jax, jax.numpy as jnp, numpy as np
import src105, derived105
src105.VALUE = float(os.environ["K"])
importlib.reload(derived105)
@jax.jit
def f(x):
    return x * derived105.SCALE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
