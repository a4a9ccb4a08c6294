SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Cfg:
    __slots__ = ("k",)
cfg = Cfg(); cfg.k = float(os.environ["K"])   # no __dict__
@jax.jit
def f(x):
    return x * cfg.k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
