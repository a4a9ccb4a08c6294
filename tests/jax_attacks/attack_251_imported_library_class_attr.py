SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, sys
d = os.path.abspath("venvx/lib/python3.11/site-packages"); os.makedirs(d, exist_ok=True)
open(os.path.join(d, "libcfg251.py"), "w").write("class Defaults:\n    scale = 1.0\n")
sys.path.insert(0, d)
import jax, jax.numpy as jnp, numpy as np
from libcfg251 import Defaults
Defaults.scale = float(os.environ["K"])   # the program configures an installed class
@jax.jit
def f(x):
    return x * Defaults.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
