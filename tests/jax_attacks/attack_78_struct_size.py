SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, struct, jax, jax.numpy as jnp, numpy as np
S = struct.Struct("d" * int(os.environ["K"]))
@jax.jit
def f(x):
    return x * S.size
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
