SPEC = {"variants": {"a": {"env": {"K": "0.0"}}, "b": {"env": {"K": "-0.0"}}}}
import os, functools, jax, jax.numpy as jnp, numpy as np
@functools.partial(jax.jit, static_argnums=1)
def f(x, k):
    return x / k
print("RESULT", repr(np.asarray(f(jnp.arange(1.0, 4.0), float(os.environ["K"]))).tolist()))
