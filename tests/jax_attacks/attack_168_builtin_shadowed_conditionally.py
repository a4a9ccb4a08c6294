SPEC = {"variants": {"a": {"env": {"K": "shadow"}}, "b": {"env": {"K": "plain"}}}, "order": "bbaabab"}
# a module global shadows a builtin in one variant only
import os, jax, jax.numpy as jnp, numpy as np
if os.environ["K"] == "shadow":
    def abs(v):
        return v * -3.0
@jax.jit
def f(x):
    return x * abs(-2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
