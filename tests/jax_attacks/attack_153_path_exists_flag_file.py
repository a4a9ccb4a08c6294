SPEC = {"variants": {"a": {"files": {"use_big153.flag": ""}}, "b": {"files": {}, "delete": ["use_big153.flag"]}}}
# presence of a flag file, checked with os.path inside the trace
import posixpath, jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * (3.0 if posixpath.exists("use_big153.flag") else 2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
