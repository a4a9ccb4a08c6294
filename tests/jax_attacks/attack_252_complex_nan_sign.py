SPEC = {"variants": {"a": {"env": {"K": "+"}}, "b": {"env": {"K": "-"}}}}
# complex globals whose real part is a NaN of either sign (the same repr, the same hex parts)
import os, math, jax, jax.numpy as jnp, numpy as np
NAN = float("nan") if os.environ["K"] == "+" else -float("nan")
C = complex(NAN, 1.0)
@jax.jit
def f(x):
    return x * math.copysign(2.0, C.real)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
