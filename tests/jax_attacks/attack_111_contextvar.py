SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a ContextVar set before the jit call, read in the trace
import os, contextvars, jax, jax.numpy as jnp, numpy as np
SCALE = contextvars.ContextVar("scale", default=1.0)
SCALE.set(float(os.environ["K"]))
@jax.jit
def f(x):
    return x * SCALE.get()
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
