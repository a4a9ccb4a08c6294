SPEC = {"variants": {"a": {"env": {"K": "1.0"}}, "b": {"env": {"K": "1.000"}}}}
# Decimal('1.0') == Decimal('1.000') with equal hashes; its string form differs
import os, decimal, jax, jax.numpy as jnp, numpy as np
D = decimal.Decimal(os.environ["K"])
@jax.jit
def f(x):
    return x * float(len(str(D)))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
