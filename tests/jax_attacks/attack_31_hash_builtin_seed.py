SPEC = {"variants": {"a": {"env": {"PYTHONHASHSEED": "1"}}, "b": {"env": {"PYTHONHASHSEED": "2"}}}}
import jax, jax.numpy as jnp, numpy as np
# (variants use PYTHONHASHSEED; see SPEC override below)
@jax.jit
def f(x):
    return x * (hash("scale") % 5 + 1)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
