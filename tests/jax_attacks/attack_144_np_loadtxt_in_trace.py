SPEC = {"variants": {"a": {"files": {"scale144.txt": "2.0\n"}, "mtime": {"scale144.txt": 1700000000}},
                     "b": {"files": {"scale144.txt": "3.0\n"}, "mtime": {"scale144.txt": 1700000000}}}}
# a data file read through numpy inside the trace (same size, same mtime)
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(np.loadtxt("scale144.txt"))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
