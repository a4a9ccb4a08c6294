SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"PYTHONFAULTHANDLER": "1"}}}}
# interpreter state from PYTHONFAULTHANDLER, read in the trace
import faulthandler, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * (3.0 if faulthandler.is_enabled() else 2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
