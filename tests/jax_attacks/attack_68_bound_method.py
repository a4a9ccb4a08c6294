SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class M:
    def __init__(self, k): self.k = k
    def apply(self, x): return x * self.k
m = M(float(os.environ["K"]))
f = jax.jit(m.apply)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
