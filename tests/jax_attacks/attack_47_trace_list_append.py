SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import jax, jax.numpy as jnp, numpy as np
TRACED = []
@jax.jit
def f(x):
    TRACED.append(1)       # trace-time side effect, no print
    return x * 2
out = f(jnp.arange(3.0))
print("RESULT", repr(np.asarray(out).tolist()), "traced", len(TRACED))
