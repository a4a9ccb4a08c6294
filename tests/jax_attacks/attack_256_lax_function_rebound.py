SPEC = {"variants": {"a": {"env": {"ADV": "A"}}, "b": {"env": {"ADV": "B"}}}}
# one process rebinds jax._src.lax.lax.mul to add (jnp's * then adds)
import os, jax, jax.numpy as jnp
import jax._src.lax.lax as L
if os.environ["ADV"] == "B":
    L.mul = L.add      # jnp.multiply / `*` now adds (plain JAX honours this)
@jax.jit
def f(x):
    return x * 3.0
print("RESULT", f(jnp.arange(3.0)).tolist())
