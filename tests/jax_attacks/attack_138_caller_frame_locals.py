SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# the trace reads a *local* of the calling function via inspect.currentframe()
import os, inspect, jax, jax.numpy as jnp, numpy as np
def caller_scale():
    fr = inspect.currentframe()
    while fr is not None and fr.f_code.co_name != "main":
        fr = fr.f_back
    return fr.f_locals["local_scale"]
@jax.jit
def f(x):
    return x * caller_scale()
def main():
    local_scale = float(os.environ["K"])
    return f(jnp.arange(3.0))
print("RESULT", repr(np.asarray(main()).tolist()))
