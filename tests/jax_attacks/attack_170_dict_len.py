SPEC = {"variants": {"a": {"env": {"K": "1"}}, "b": {"env": {"K": "2"}}}}
# the trace reads one entry of a global dict and its length; only the extra key differs
import os, jax, jax.numpy as jnp, numpy as np
TABLE = {"x": 2.0}
if os.environ["K"] == "2":
    TABLE["y"] = 5.0
@jax.jit
def f(x):
    return x * TABLE["x"] + len(TABLE)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
