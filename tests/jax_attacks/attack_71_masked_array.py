SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
W = np.ma.array([1.0, 2.0, 3.0], mask=[False, os.environ["K"] == "3", False])   # same data, other mask
@jax.jit
def f(x):
    return x * np.ma.filled(W, 0.0)
print("RESULT", repr(np.asarray(f(jnp.ones(3))).tolist()))
