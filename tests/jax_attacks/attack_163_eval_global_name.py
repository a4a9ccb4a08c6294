SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a global named only inside a string, evaluated in the trace
import os, jax, jax.numpy as jnp, numpy as np
HIDDEN_SCALE = float(os.environ["K"])
@jax.jit
def f(x):
    return x * eval("HIDDEN_" + "SCALE")
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
