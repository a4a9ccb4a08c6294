SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Tagged(np.ndarray):
    pass
W = np.ones(3).view(Tagged)
W.scale = float(os.environ["K"])        # extra state beside identical data
@jax.jit
def f(x):
    return x * W.scale
print("RESULT", repr(np.asarray(f(jnp.ones(3))).tolist()))
