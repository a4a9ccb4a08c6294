SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, types, jax, jax.numpy as jnp, numpy as np
CFG = types.MappingProxyType({"k": float(os.environ["K"])})
@jax.jit
def f(x):
    return x * CFG["k"]
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
