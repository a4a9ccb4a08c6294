SPEC = {"variants": {"a": {"args": ["ab"], "files": {"ab/.keep": "", "abc/.keep": ""}}, "b": {"args": ["abc"], "files": {"ab/.keep": "", "abc/.keep": ""}}}}
# the program chdirs by argv before the jit call; the trace reads the cwd through pathlib
import os, sys, pathlib, jax, jax.numpy as jnp, numpy as np
os.chdir(sys.argv[1])
@jax.jit
def f(x):
    return x * float(len(pathlib.Path.cwd().name))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
