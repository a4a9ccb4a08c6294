SPEC = {"variants": {"a": {"args": ["allow"]}, "b": {"args": ["raise"]}}}
# a thread-local jax config context (rank promotion) entered from argv around the call
import sys, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x + jnp.ones((2, 3))
with jax.numpy_rank_promotion(sys.argv[1]):
    try:
        r = np.asarray(f(jnp.arange(3.0))).tolist()
    except Exception as e:
        r = type(e).__name__
print("RESULT", repr(r))
