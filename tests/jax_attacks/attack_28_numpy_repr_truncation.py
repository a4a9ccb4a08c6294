SPEC = {"variants": {"a": {"env": {"K": "0"}}, "b": {"env": {"K": "1"}}}}
import os, jax, jax.numpy as jnp, numpy as np
W = np.ones(4000, np.float32)
W[2000] += float(os.environ["K"])        # repr of W is the same ("...")
E = np.float64(1.0) + float(os.environ["K"]) * 1e-12   # repr precision
@jax.jit
def f(x):
    return (x * W).sum() + E
print("RESULT", repr(np.asarray(f(jnp.ones(4000))).tolist()))
