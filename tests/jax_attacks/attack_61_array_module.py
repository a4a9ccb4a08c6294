SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, array, jax, jax.numpy as jnp, numpy as np
A = array.array("d", [float(os.environ["K"])])
@jax.jit
def f(x):
    return x * A[0]
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
