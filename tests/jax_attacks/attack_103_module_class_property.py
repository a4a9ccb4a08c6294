SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"plain103.py": "NAME = 'plain'\n"}, "mtime": {"plain103.py": 1700000000}},
                     "b": {"env": {"K": "3"}, "files": {"plain103.py": "NAME = 'plain'\n"}, "mtime": {"plain103.py": 1700000000}}}}
# an unchanged file module whose __class__ is swapped for a ModuleType subclass with a property
import os, types, jax, jax.numpy as jnp, numpy as np
import plain103
_hidden = [float(os.environ["K"])]
class PropModule(types.ModuleType):
    @property
    def SCALE(self):
        return _hidden[0]
plain103.__class__ = PropModule
@jax.jit
def f(x):
    return x * plain103.SCALE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
