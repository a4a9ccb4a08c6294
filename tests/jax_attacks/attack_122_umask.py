SPEC = {"variants": {"a": {"args": ["18"]}, "b": {"args": ["146"]}}}
# process umask set from argv; the trace observes it through tempfile + pathlib (no os in the trace)
import os, sys, tempfile, pathlib, jax, jax.numpy as jnp, numpy as np
os.umask(int(sys.argv[1]))
@jax.jit
def f(x):
    p = pathlib.Path(tempfile.mkdtemp())
    m = p.stat().st_mode & 0o777
    p.rmdir()
    return x * float(m)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
