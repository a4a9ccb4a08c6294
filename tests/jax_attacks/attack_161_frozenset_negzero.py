SPEC = {"variants": {"a": {"env": {"K": "+"}}, "b": {"env": {"K": "-"}}}}
# frozenset({0.0}) == frozenset({-0.0}); the trace reads the element's sign
import os, math, jax, jax.numpy as jnp, numpy as np
S = frozenset({0.0}) if os.environ["K"] == "+" else frozenset({-0.0})
@jax.jit
def f(x):
    return x * math.copysign(2.0, next(iter(S)))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
