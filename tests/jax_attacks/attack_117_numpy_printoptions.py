SPEC = {"variants": {"a": {"args": ["2"]}, "b": {"args": ["4"]}}}
# numpy print options (set from argv) change a value the trace derives from array2string
import sys, jax, jax.numpy as jnp, numpy as np
np.set_printoptions(precision=int(sys.argv[1]))
@jax.jit
def f(x):
    s = float(np.array2string(np.array([1 / 3]))[1:-1])
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
