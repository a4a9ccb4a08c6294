SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
A = np.arange(4.0, dtype=np.float32).reshape(2, 2)
W = A if os.environ["K"] == "2" else A.T        # same buffer, same shape and dtype, other strides
@jax.jit
def f(x):
    return x @ W
print("RESULT", repr(np.asarray(f(jnp.array([1.0, 10.0]))).tolist()))
