SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, random, jax, jax.numpy as jnp, numpy as np
random.seed(int(os.environ["K"]))
@jax.jit
def f(x):
    return x * random.random()       # hidden state of the random module
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
