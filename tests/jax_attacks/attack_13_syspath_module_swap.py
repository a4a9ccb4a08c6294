SPEC = {"variants": {"a": {"env": {"D": "da"}}, "b": {"env": {"D": "db"}}},}
import os, sys
os.makedirs("da", exist_ok=True); os.makedirs("db", exist_ok=True)
open("da/helper13.py", "w").write("def g(x):\n    return x * 2.0\n")
open("db/helper13.py", "w").write("def g(x):\n    return x * 3.0\n")
sys.path.insert(0, os.environ["D"])   # same module name, another file
import jax, jax.numpy as jnp, numpy as np
import helper13
@jax.jit
def f(x):
    return helper13.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
