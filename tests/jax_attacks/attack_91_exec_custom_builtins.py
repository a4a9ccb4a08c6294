SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, builtins, jax, jax.numpy as jnp, numpy as np
k = float(os.environ["K"])
b = dict(vars(builtins)); b["abs"] = lambda v: builtins.abs(v) * k    # per-namespace builtins
ns = {"__builtins__": b}
exec("def f(x):\n    return abs(x) + 1\n", ns)
f = jax.jit(ns["f"])
print("RESULT", repr(np.asarray(f(jnp.arange(-1.0, 2.0))).tolist()))
