SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
ns = {}
exec("def f(x):\n    return x * %s.0\n" % os.environ["K"], ns)   # notebook-like cell
f = jax.jit(ns["f"])
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
