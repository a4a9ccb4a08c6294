SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class AttrDict(dict):
    pass
CFG = AttrDict(name="m")
CFG.scale = float(os.environ["K"])    # equal dict items, other attribute
@jax.jit
def f(x):
    return x * CFG.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
