SPEC = {"variants": {"a": {"args": ["1"]}, "b": {"args": ["2"]}}}
# number of atexit handlers registered (per argv) by the program, observed in the trace
import sys, atexit, jax, jax.numpy as jnp, numpy as np
BASE = atexit._ncallbacks()
for _ in range(int(sys.argv[1])):
    atexit.register(print, end="")
@jax.jit
def f(x):
    return x * float(atexit._ncallbacks() - BASE)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
