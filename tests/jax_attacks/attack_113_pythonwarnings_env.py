SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"PYTHONWARNINGS": "error::UserWarning"}}}}
# the interpreter reads PYTHONWARNINGS; a warning in the trace becomes an exception in one variant
import warnings, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    try:
        warnings.warn("w", UserWarning)
        s = 2.0
    except UserWarning:
        s = 3.0
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
