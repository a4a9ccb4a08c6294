SPEC = {"variants": {"a": {"env": {"K": "rw"}}, "b": {"env": {"K": "ro"}}}}
# same array contents/dtype/shape, different writeable flag
import os, jax, jax.numpy as jnp, numpy as np
TABLE = np.arange(3.0)
TABLE.flags.writeable = os.environ["K"] == "rw"
@jax.jit
def f(x):
    return x * (2.0 if TABLE.flags.writeable else 3.0) + TABLE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
