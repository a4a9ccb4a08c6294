SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# __init_subclass__ stores a class keyword in a base-class registry (not on the subclass)
import os, jax, jax.numpy as jnp, numpy as np
class Base:
    _registry = {}
    def __init_subclass__(cls, scale=1.0, **kw):
        super().__init_subclass__(**kw)
        Base._registry[cls.__name__] = scale
    def scale(self):
        return Base._registry[type(self).__name__]
class Impl(Base, scale=float(os.environ["K"])):
    pass
IMPL = Impl()
@jax.jit
def f(x):
    return x * IMPL.scale()
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
