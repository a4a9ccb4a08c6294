SPEC = {"variants": {"a": {"env": {"K": "A"}}, "b": {"env": {"K": "B"}}}}
# a class's __bases__ reassigned in one variant (its own __dict__ unchanged)
import os, jax, jax.numpy as jnp, numpy as np
class A:
    def scale(self):
        return 2.0
class B:
    def scale(self):
        return 3.0
class C(A):
    pass
if os.environ["K"] == "B":
    C.__bases__ = (B,)
OBJ = C()
@jax.jit
def f(x):
    return x * OBJ.scale()
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
