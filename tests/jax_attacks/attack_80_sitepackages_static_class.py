SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, sys, functools
d = os.path.abspath("venvx/lib/python3.11/site-packages"); os.makedirs(d, exist_ok=True)
open(os.path.join(d, "libcfg80.py"), "w").write(
    "class Cfg:\n    def __init__(self, k): self.k = k\n"
    "    def __hash__(self): return 1\n    def __eq__(self, o): return isinstance(o, Cfg)\n")
sys.path.insert(0, d)
import jax, jax.numpy as jnp, numpy as np
from libcfg80 import Cfg
@functools.partial(jax.jit, static_argnums=1)
def f(x, cfg):
    return x * cfg.k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0), Cfg(float(os.environ["K"])))).tolist()))
