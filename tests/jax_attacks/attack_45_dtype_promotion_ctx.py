SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x, y):
    return x + y
mode = "standard" if os.environ["K"] == "2" else "strict"
try:
    with jax.numpy_dtype_promotion(mode):
        out = f(jnp.arange(3.0), jnp.arange(3))
    print("RESULT", repr(np.asarray(out).tolist()))
except Exception as e:
    print("RESULT error", type(e).__name__)
