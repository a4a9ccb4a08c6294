SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
if os.environ["K"] == "3":
    jnp.sin = jnp.cos          # a library function patched by the program
@jax.jit
def f(x):
    return jnp.sin(x)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
