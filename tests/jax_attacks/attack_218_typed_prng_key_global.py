SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# global typed PRNG key array (not convertible by np.asarray) captured by the trace
import sys
import numpy as np, jax, jax.numpy as jnp
KEY = jax.random.key(int(sys.argv[1]))
@jax.jit
def f(x):
    return x + jax.random.uniform(KEY, x.shape)
print("RESULT", [round(v, 5) for v in np.asarray(f(np.zeros(2, np.float32))).tolist()])
