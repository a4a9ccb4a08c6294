SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, collections, jax, jax.numpy as jnp, numpy as np
class P(collections.namedtuple("PBase", "a b")):
    pass                              # no __slots__: instances carry a __dict__
p = P(1.0, 2.0)
p.extra = float(os.environ["K"])      # equal tuple value, other attribute
@jax.jit
def f(x):
    return x * p.a + p.extra
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
