SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a __set_name__ descriptor keeps per-instance values in a WeakKeyDictionary held by the descriptor
import os, weakref, jax, jax.numpy as jnp, numpy as np
class Field:
    def __set_name__(self, owner, name):
        self.name = name
        self.store = weakref.WeakKeyDictionary()
    def __get__(self, obj, owner=None):
        return self.store[obj]
    def __set__(self, obj, value):
        self.store[obj] = value
class Cfg:
    scale = Field()
CFG = Cfg()
CFG.scale = float(os.environ["K"])
@jax.jit
def f(x):
    return x * CFG.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
