SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# keyword-only defaults (__kwdefaults__) of a callee replaced by the program
import os, jax, jax.numpy as jnp, numpy as np
def g(x, *, k=1.0):
    return x * k
g.__kwdefaults__ = {"k": float(os.environ["K"])}
@jax.jit
def f(x):
    return g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
