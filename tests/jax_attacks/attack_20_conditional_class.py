SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
class Impl:   # same module and qualified name, class attribute from the environment
    k = float(os.environ["K"])
@jax.jit
def f(x):
    return x * Impl.k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
