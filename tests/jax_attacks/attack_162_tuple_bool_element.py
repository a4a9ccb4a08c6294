SPEC = {"variants": {"a": {"env": {"K": "int"}}, "b": {"env": {"K": "bool"}}}}
# (1,) == (True,) with equal hashes; the element's type changes the traced dtype
import os, jax, jax.numpy as jnp, numpy as np
T = (1,) if os.environ["K"] == "int" else (True,)
@jax.jit
def f(x):
    return jnp.asarray(T[0]) | jnp.asarray(T[0])
r = f(jnp.arange(3.0))
print("RESULT", str(r.dtype), np.asarray(r).tolist())
