SPEC = {"variants": {"a": {"env": {"HOME": "/tmp/h"}}, "b": {"env": {"HOME": "/tmp/hh"}}}}
# os.path (posixpath) reads HOME from the environment inside the trace
import posixpath, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * float(len(posixpath.expanduser("~")))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
