SPEC = {"variants": {"a": {"args": ["1000"]}, "b": {"args": ["5000"]}}}
# C-level csv module state set from argv, read in the trace
import sys, csv, jax, jax.numpy as jnp, numpy as np
csv.field_size_limit(int(sys.argv[1]))
@jax.jit
def f(x):
    return x * float(csv.field_size_limit())
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
