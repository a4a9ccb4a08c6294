SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# helper imported from a zip archive whose content changes between runs
import os, sys, zipfile
with zipfile.ZipFile("h54.zip", "w") as z:
    z.writestr(zipfile.ZipInfo("helper54.py", (2020, 1, 1, 0, 0, 0)), "def g(x):\n    return x * %s.0\n" % os.environ["K"])
sys.path.insert(0, os.path.abspath("h54.zip"))
import jax, jax.numpy as jnp, numpy as np
import helper54
@jax.jit
def f(x):
    return helper54.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
