SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, sys, jax, jax.numpy as jnp, numpy as np
sys.setrecursionlimit(int(os.environ["K"]) * 1000)
@jax.jit
def f(x):
    return x * (sys.getrecursionlimit() // 1000)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
