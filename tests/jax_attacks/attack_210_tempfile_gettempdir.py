SPEC = {"variants": {"a": {"env": {"TMPDIR": "/tmp"}}, "b": {"env": {"TMPDIR": "/var/tmp"}}}, "order": "abba"}
# tempfile caches TMPDIR in the module global tempfile.tempdir before the trace
import tempfile
import numpy as np, jax, jax.numpy as jnp
tempfile.gettempdir()
@jax.jit
def f(x):
    return x * len(tempfile.gettempdir())
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
