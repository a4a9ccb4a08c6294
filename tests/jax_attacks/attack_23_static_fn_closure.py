SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, functools, jax, jax.numpy as jnp, numpy as np
def make(k):
    def op(x):
        return x * k
    return op
@functools.partial(jax.jit, static_argnums=1)
def f(x, op):
    return op(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0), make(float(os.environ["K"])))).tolist()))
