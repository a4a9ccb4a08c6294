SPEC = {"variants": {"a": {"env": {"ADV": "A"}}, "b": {"env": {"ADV": "B"}}}}
# one process registers its own lowering of sin (as cos)
import os, jax, jax.numpy as jnp
from jax._src.interpreters import mlir
from jax._src.lax import lax as L
if os.environ["ADV"] == "B":
    # sin is lowered as cos in this process
    mlir.register_lowering(L.sin_p, mlir.lower_fun(lambda x, **kw: L.cos(x), multiple_results=False))
@jax.jit
def f(x):
    return jnp.sin(x)
print("RESULT", f(jnp.arange(3.0)).tolist())
