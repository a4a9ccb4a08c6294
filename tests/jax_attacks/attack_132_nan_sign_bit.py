SPEC = {"variants": {"a": {"env": {"K": "+"}}, "b": {"env": {"K": "-"}}}}
# NaN globals that differ only in the sign bit (same repr, never == anything)
import os, math, jax, jax.numpy as jnp, numpy as np
NAN = float("nan") if os.environ["K"] == "+" else -float("nan")
@jax.jit
def f(x):
    return x * math.copysign(2.0, NAN)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
