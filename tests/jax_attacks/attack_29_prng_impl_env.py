SPEC = {"variants": {"a": {"env": {"JAX_DEFAULT_PRNG_IMPL": "threefry2x32"}}, "b": {"env": {"JAX_DEFAULT_PRNG_IMPL": "rbg"}}}}
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x + jax.random.uniform(jax.random.key(0), x.shape)
print("RESULT", repr(np.asarray(f(jnp.zeros(3))).tolist()))
