SPEC = {"variants": {"a": {"args": ["2.0"]}, "b": {"args": ["3.0"]}}, "order": "abba"}
# function compiled at run time from generated text, but with filename/line claiming the def below
import sys
import numpy as np, jax, jax.numpy as jnp
def g(x):
    return x * 2.0
src = "\n" * (g.__code__.co_firstlineno - 1) + "def g(x):\n    return x * %s\n" % sys.argv[1]
ns = {}
exec(compile(src, g.__code__.co_filename, "exec"), globals(), ns)
f = jax.jit(ns["g"])
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
