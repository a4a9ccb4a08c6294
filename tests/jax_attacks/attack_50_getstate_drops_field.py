SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Model:
    def __init__(self, k):
        self.name = "m"
        self._cache_k = k              # transient, not pickled
    def __getstate__(self):
        return {"name": self.name}
    def __call__(self, x):
        return x * self._cache_k
model = Model(float(os.environ["K"]))
@jax.jit
def f(x):
    return model(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
