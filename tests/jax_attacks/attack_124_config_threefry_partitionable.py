SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}}
# a jax config flag flipped at runtime from argv changes the random bits generated in the trace
import sys, jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_threefry_partitionable", sys.argv[1] == "1")
@jax.jit
def f(x):
    return x + jax.random.uniform(jax.random.key(0), (3,))
print("RESULT", repr(np.round(np.asarray(f(jnp.arange(3.0))), 5).tolist()))
