SPEC = {"variants": {"a": {"env": {"ADV": "2"}}, "b": {"env": {"ADV": "3"}}}}
# a program primitive's lowering rule reads a global set from the environment (lowering runs after the trace)
import os, jax, jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import mlir
from jax._src.lax import lax as L
K = float(os.environ["ADV"])
p = Primitive("advscale")
p.def_abstract_eval(lambda x: x)
def _lower(ctx, x):
    return mlir.lower_fun(lambda y: L.mul(y, L.full_like(y, K)), multiple_results=False)(ctx, x)
mlir.register_lowering(p, _lower)
@jax.jit
def f(x):
    return p.bind(x)
print("RESULT", f(jnp.arange(3.0)).tolist())
