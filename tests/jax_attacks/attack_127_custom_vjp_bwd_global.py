SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a custom_vjp whose bwd rule reads a global; only the gradient (inside the jit) sees it
import os, jax, jax.numpy as jnp, numpy as np
GSCALE = float(os.environ["K"])
@jax.custom_vjp
def g(x):
    return x
def g_fwd(x):
    return x, None
def g_bwd(res, ct):
    return (ct * GSCALE,)
g.defvjp(g_fwd, g_bwd)
@jax.jit
def f(x):
    return jax.grad(lambda y: g(y).sum())(x)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
