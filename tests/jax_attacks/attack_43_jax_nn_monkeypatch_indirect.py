SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
import jax._src.nn.functions as F
if os.environ["K"] == "3":
    F.relu = jax.nn.gelu       # patched inside JAX; the program calls jax.nn.silu -> not affected, relu via alias
    jax.nn.relu = F.relu
@jax.jit
def f(x):
    return jax.nn.relu(x)
print("RESULT", repr(np.asarray(f(jnp.arange(-1.0, 2.0))).tolist()))
