SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import sys, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    sys.stdout.write("RESULT tracing\n")
    return x * 2
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
