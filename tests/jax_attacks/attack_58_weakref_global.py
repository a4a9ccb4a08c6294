SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, weakref, jax, jax.numpy as jnp, numpy as np
class Cfg: pass
cfg = Cfg(); cfg.k = float(os.environ["K"])
R = weakref.ref(cfg)
@jax.jit
def f(x):
    return x * R().k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
