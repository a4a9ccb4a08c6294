SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}}
# x64 enabled via a context manager only around the call; the trace creates its own integers
import sys, contextlib, jax, jax.numpy as jnp, numpy as np
try:
    ctx = jax.enable_x64
except AttributeError:
    from jax.experimental import enable_x64 as ctx
@jax.jit
def f(x):
    return x * 0 + jnp.arange(3)
with (ctx(True) if sys.argv[1] == "1" else contextlib.nullcontext()):
    r = f(jnp.arange(3.0))
    print("RESULT", str(r.dtype), np.asarray(r).tolist())
