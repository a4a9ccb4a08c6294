SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# same object, same (empty) __dict__, but its __class__ is reassigned in one variant
import os, jax, jax.numpy as jnp, numpy as np
class A:
    def scale(self):
        return 2.0
class B:
    def scale(self):
        return 3.0
OBJ = A()
if os.environ["K"] == "3":
    OBJ.__class__ = B
@jax.jit
def f(x):
    return x * OBJ.scale()
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
