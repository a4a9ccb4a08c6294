SPEC = {"variants": {"a": {"env": {"K": "int"}}, "b": {"env": {"K": "float"}}}}
import os, functools, jax, jax.numpy as jnp, numpy as np
@functools.partial(jax.jit, static_argnums=1)
def f(x, k):
    return x * k
out = f(jnp.arange(3), {"int": 2, "float": 2.0}[os.environ["K"]])
print("RESULT", out.dtype, repr(np.asarray(out).tolist()))
