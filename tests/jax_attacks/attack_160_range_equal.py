SPEC = {"variants": {"a": {"env": {"K": "3"}}, "b": {"env": {"K": "4"}}}}
# range(0, 3, 2) == range(0, 4, 2) (same elements, same hash) but .stop differs
import os, jax, jax.numpy as jnp, numpy as np
R = range(0, int(os.environ["K"]), 2)
@jax.jit
def f(x):
    return x * float(R.stop)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
