SPEC = {"variants": {"a": {"env": {"K": "0.0"}}, "b": {"env": {"K": "-0.0"}}}}
import os, jax, jax.numpy as jnp, numpy as np
K = float(os.environ["K"])  # 0.0 == -0.0 and hash(0.0) == hash(-0.0)
@jax.jit
def f(x):
    return x / K
print("RESULT", repr(np.asarray(f(jnp.arange(1.0, 4.0))).tolist()))
