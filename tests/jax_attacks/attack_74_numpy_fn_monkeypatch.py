SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
if os.environ["K"] == "3":
    np.sqrt = np.cbrt
@jax.jit
def f(x):
    return x * np.sqrt(8.0)
print("RESULT", repr(np.asarray(f(jnp.ones(3))).tolist()))
