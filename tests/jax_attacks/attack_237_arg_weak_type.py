SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# same shape/dtype argument, Python float (weakly typed) vs np.float32
import sys
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    return x * jnp.ones(2, jnp.bfloat16)
arg = 1.5 if sys.argv[1] == "0" else np.float32(1.5)
r = f(arg)
print("RESULT", str(r.dtype), np.asarray(r, np.float32).tolist())
