SPEC = {"variants": {"a": {"env": {"ADV": "A"}}, "b": {"env": {"ADV": "B"}}}}
# one process rebinds Tracer.__mul__ to __add__
import os, jax, jax.numpy as jnp
from jax._src import core
if os.environ["ADV"] == "B":
    core.Tracer.__mul__ = core.Tracer.__add__
@jax.jit
def f(x):
    return x * 3.0
print("RESULT", f(jnp.arange(3.0)).tolist())
