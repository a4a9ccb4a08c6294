SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"JAX_DISABLE_JIT": "1"}}}, "order": "abba"}
# with jit disabled the function sees concrete arrays
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    return x + (1.0 if isinstance(x, jax.core.Tracer) else 2.0)
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
