SPEC = {"variants": {"a": {"env": {"K": "set"}}, "b": {"env": {"K": "unset"}}}, "order": "bbaabab"}
# a global that exists only in one variant; the trace falls back on NameError
import os, jax, jax.numpy as jnp, numpy as np
if os.environ["K"] == "set":
    OPTIONAL_SCALE = 3.0
@jax.jit
def f(x):
    try:
        s = OPTIONAL_SCALE
    except NameError:
        s = 2.0
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
