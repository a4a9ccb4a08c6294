SPEC = {"variants": {"a": {"env": {"PYTHONUSERBASE": "/tmp/ub"}}, "b": {"env": {"PYTHONUSERBASE": "/tmp/ubbb"}}}}
# site computes USER_BASE from PYTHONUSERBASE at startup; the trace reads it through site
import site, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(len(site.getuserbase()))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
