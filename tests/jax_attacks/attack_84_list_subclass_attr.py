SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Layers(list):
    pass
L = Layers([1.0, 2.0])
L.scale = float(os.environ["K"])
@jax.jit
def f(x):
    return x * L[0] * L.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
