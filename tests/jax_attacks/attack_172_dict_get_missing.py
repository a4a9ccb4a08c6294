SPEC = {"variants": {"a": {"env": {"K": "no"}}, "b": {"env": {"K": "yes"}}}, "order": "aababba"}
# dict.get on a key present only in one variant
import os, jax, jax.numpy as jnp, numpy as np
SCALES = {}
if os.environ["K"] == "yes":
    SCALES["b"] = 3.0
@jax.jit
def f(x):
    return x * SCALES.get("b", 2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
