SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, builtins, jax, jax.numpy as jnp, numpy as np
if os.environ["K"] == "3":
    _orig = builtins.abs
    builtins.abs = lambda v: _orig(v) * 3     # a patched builtin
@jax.jit
def f(x):
    return abs(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(-1.0, 2.0))).tolist()))
