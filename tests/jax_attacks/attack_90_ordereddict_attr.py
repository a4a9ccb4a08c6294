SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, collections, jax, jax.numpy as jnp, numpy as np
D = collections.OrderedDict(a=1.0)
D.scale = float(os.environ["K"])        # OrderedDict instances have a __dict__
@jax.jit
def f(x):
    return x * D["a"] * D.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
