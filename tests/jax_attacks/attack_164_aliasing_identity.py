SPEC = {"variants": {"a": {"env": {"K": "alias"}}, "b": {"env": {"K": "copy"}}}}
# two globals holding equal lists: the same object in one variant, distinct objects in the other
import os, jax, jax.numpy as jnp, numpy as np
A = [1.0, 2.0]
B = A if os.environ["K"] == "alias" else list(A)
@jax.jit
def f(x):
    return x * (3.0 if A is B else 2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
