SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, builtins, jax, jax.numpy as jnp, numpy as np
builtins.SCALE_K = float(os.environ["K"])   # not a module global: the name resolves in builtins
@jax.jit
def f(x):
    return x * SCALE_K
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
