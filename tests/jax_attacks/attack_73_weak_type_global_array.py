SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
W = jnp.asarray(2.0) if os.environ["K"] == "2" else jnp.asarray(2.0, dtype=jnp.float32)  # weak vs strong f32, same bytes
@jax.jit
def f(x):
    return x * W
out = f(jnp.ones(3, jnp.bfloat16))
print("RESULT", out.dtype, repr(np.asarray(out.astype(jnp.float32)).tolist()))
