SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a singledispatch registration made only in one variant; the trace dispatches on a Python float
import os, functools, jax, jax.numpy as jnp, numpy as np
@functools.singledispatch
def factor(v):
    return 2.0
def _float_factor(v):
    return 3.0
if os.environ["K"] == "3":
    factor.register(float, _float_factor)
@jax.jit
def f(x):
    return x * factor(1.5)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
