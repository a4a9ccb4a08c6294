SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Tagged(float):
    pass
K = Tagged(1.0)
K.scale = float(os.environ["K"])      # equal floats, other attribute
@jax.jit
def f(x):
    return x * K + K.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
