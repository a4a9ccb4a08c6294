SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
K = float(os.environ["K"])
@jax.jit
def f(x):
    ys = [x * K for _ in range(2)]
    return sum(y + K for y in ys)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
