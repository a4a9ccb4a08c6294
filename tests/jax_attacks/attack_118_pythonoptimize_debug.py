SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"PYTHONOPTIMIZE": "1"}}}}
# PYTHONOPTIMIZE strips asserts / flips __debug__ without touching the source text
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    s = 2.0
    try:
        assert False
    except AssertionError:
        s = 3.0
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
