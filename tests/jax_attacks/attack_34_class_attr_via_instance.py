SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Cfg:
    k = float(os.environ["K"])     # class attribute; the instance's state is empty
    def scale(self, x):
        return x * self.k
cfg = Cfg()
@jax.jit
def f(x):
    return cfg.scale(x) + cfg.k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
