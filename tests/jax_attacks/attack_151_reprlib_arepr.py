SPEC = {"variants": {"a": {"args": ["10"]}, "b": {"args": ["20"]}}}
# a stdlib singleton's attribute (reprlib.aRepr) configured from argv
import sys, reprlib, jax, jax.numpy as jnp, numpy as np
reprlib.aRepr.maxstring = int(sys.argv[1])
@jax.jit
def f(x):
    return x * float(len(reprlib.repr("z" * 100)))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
