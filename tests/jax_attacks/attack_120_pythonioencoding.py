SPEC = {"variants": {"a": {"env": {"PYTHONIOENCODING": "utf-8"}}, "b": {"env": {"PYTHONIOENCODING": "latin-1"}}}}
# the stdout encoding (from PYTHONIOENCODING) read in the trace
import sys, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(len(sys.stdout.encoding))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
