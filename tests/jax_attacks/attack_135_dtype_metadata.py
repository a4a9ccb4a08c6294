SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# numpy dtypes with different metadata compare and hash equal
import os, jax, jax.numpy as jnp, numpy as np
DT = np.dtype(np.float32, metadata={"scale": float(os.environ["K"])})
@jax.jit
def f(x):
    return x * DT.metadata["scale"]
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
