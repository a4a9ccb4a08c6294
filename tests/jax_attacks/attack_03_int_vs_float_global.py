SPEC = {"variants": {"a": {"env": {"K": "int"}}, "b": {"env": {"K": "float"}}}}
import os, jax, jax.numpy as jnp, numpy as np
K = {"int": 2, "float": 2.0, "bool": True}[os.environ["K"]]   # 2 == 2.0
@jax.jit
def f(x):
    return x * K
out = f(jnp.arange(3))
print("RESULT", out.dtype, repr(np.asarray(out).tolist()))
