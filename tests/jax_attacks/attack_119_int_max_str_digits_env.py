SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"PYTHONINTMAXSTRDIGITS": "0"}}}}
# the interpreter's int->str digit limit comes from the environment; the trace branches on it
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    try:
        s = float(len(str(10 ** 5000)) % 11)
    except ValueError:
        s = 3.0
    return x * s
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
