SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
np.random.seed(int(os.environ["K"]))
@jax.jit
def f(x):
    return x * float(np.random.rand())
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
