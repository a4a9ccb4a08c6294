SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, types, jax, jax.numpy as jnp, numpy as np
SCALE = 5.0
def helper(x):
    return x * SCALE
# Only reached through a registry: the plain helper first, the other-globals copy second.
REG = {"a": helper, "b": types.FunctionType(helper.__code__, {"SCALE": float(os.environ["K"])})}
@jax.jit
def f(x):
    return REG["a"](x) + REG["b"](x)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
