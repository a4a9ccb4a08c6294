SPEC = {"variants": {"a": {"args": ["3"]}, "b": {"args": ["6"]}}}
# decimal's (thread/context-local) precision is set from argv before the jit call
import sys, decimal, jax, jax.numpy as jnp, numpy as np
decimal.getcontext().prec = int(sys.argv[1])
@jax.jit
def f(x):
    return x * float(decimal.Decimal(1) / decimal.Decimal(3))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
