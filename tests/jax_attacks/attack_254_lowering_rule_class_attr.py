SPEC = {"variants": {"a": {"env": {"ADV": "2"}}, "b": {"env": {"ADV": "3"}}}}
# a program lowering rule for JAX's exp on the CPU reads a class attribute set from the environment
import os, jax, jax.numpy as jnp
from jax.interpreters import mlir
from jax._src.lax import lax as L
class Tuning:
    factor = float(os.environ["ADV"])          # read only by the lowering rule
def _lower_exp(ctx, x, **params):
    return mlir.lower_fun(lambda y: L.mul(L.pow(L.full_like(y, 2.718281828), y), L.full_like(y, Tuning.factor)), multiple_results=False)(ctx, x)
mlir.register_lowering(L.exp_p, _lower_exp, platform="cpu")
@jax.jit
def f(x):
    return jnp.exp(x)
print("RESULT", f(jnp.zeros(2)).tolist())
