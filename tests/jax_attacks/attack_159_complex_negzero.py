SPEC = {"variants": {"a": {"env": {"K": "+"}}, "b": {"env": {"K": "-"}}}}
# complex globals equal (and hash-equal) but differing in the sign of a zero part
import os, math, jax, jax.numpy as jnp, numpy as np
C = complex(1.0, 0.0) if os.environ["K"] == "+" else complex(1.0, -0.0)
@jax.jit
def f(x):
    return x * math.copysign(2.0, C.imag)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
