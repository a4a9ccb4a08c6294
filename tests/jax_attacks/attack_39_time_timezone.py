SPEC = {"variants": {"a": {"env": {"TZ": "UTC"}}, "b": {"env": {"TZ": "EST+05"}}}}
import time, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x + time.timezone / 3600.0    # set from TZ at import of time
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
