SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}}}, "order": "abba"}
# XLA_FLAGS fast math changes x*0.0 for NaN / -0.0 inputs
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    return x * 0.0
r = np.asarray(f(np.array([np.nan, -0.0], np.float32)))
print("RESULT", r.tobytes().hex())
