SPEC = {"variants": {"a": {"args": ["2"]}, "b": {"args": ["3"]}}, "order": "abba"}
# trace reads the exception currently being handled by the caller
import sys
from sys import exc_info
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    e = exc_info()[1]
    return x * (float(e.args[0]) if e is not None else -1.0)
try:
    raise ValueError(sys.argv[1])
except ValueError:
    r = f(np.ones(2, np.float32))
print("RESULT", np.asarray(r).tolist())
