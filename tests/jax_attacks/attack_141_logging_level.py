SPEC = {"variants": {"a": {"args": ["INFO"]}, "b": {"args": ["DEBUG"]}}}
# logging configured from argv; the trace takes a debug-only branch
import sys, logging, jax, jax.numpy as jnp, numpy as np
logging.basicConfig(level=sys.argv[1], stream=sys.stderr)
log = logging.getLogger("app")
@jax.jit
def f(x):
    if logging.getLogger("app").isEnabledFor(logging.DEBUG):
        x = x * 3.0
    return x * 2.0
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
