SPEC = {"variants": {"a": {"env": {"K": "int64"}}, "b": {"env": {"K": "int8"}}}}
# numpy scalars of different dtypes that compare and hash equal; Python arithmetic in the trace overflows in one
import os, warnings, jax, jax.numpy as jnp, numpy as np
warnings.simplefilter("ignore")
K = np.dtype(os.environ["K"]).type(100)
@jax.jit
def f(x):
    return x * float(K + K)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
