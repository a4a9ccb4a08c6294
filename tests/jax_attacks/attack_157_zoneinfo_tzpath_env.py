SPEC = {"variants": {"a": {"env": {"PYTHONTZPATH": "/usr/share/zoneinfo"}}, "b": {"env": {"PYTHONTZPATH": "/usr/share/zoneinfo:/tmp/tzx"}}}}
# zoneinfo's TZPATH comes from an env var read by the stdlib at import time
import zoneinfo, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(len(zoneinfo.TZPATH))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
