SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# the jitted callable is a functools.wraps wrapper; __wrapped__ points to an unchanged function
import os, functools, jax, jax.numpy as jnp, numpy as np
def scaled(k):
    def deco(fn):
        @functools.wraps(fn)
        def w(x):
            return fn(x) * k
        return w
    return deco
@jax.jit
@scaled(float(os.environ["K"]))
def f(x):
    return x + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
