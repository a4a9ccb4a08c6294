SPEC = {"variants": {"a": {"files": {"scale145.txt": "2.0\n"}}, "b": {"files": {"scale145.txt": "3.5\n"}}}}
# a data file read through linecache inside the trace (ordinary old mtimes)
import linecache, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(linecache.getline("scale145.txt", 1))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
