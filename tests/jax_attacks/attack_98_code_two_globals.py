SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, types, jax, jax.numpy as jnp, numpy as np
SCALE = 5.0
def helper(x):
    return x * SCALE
# The same code object, as a function of other globals whose SCALE comes from the environment.
other = types.FunctionType(helper.__code__, {"SCALE": float(os.environ["K"]), "__builtins__": __builtins__})
@jax.jit
def f(x):
    return helper(x) + other(x)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
