SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# registering a custom URL scheme in urllib.parse's module-level lists changes urljoin
import sys
import urllib.parse
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "1":
    urllib.parse.uses_relative.append("foo")
    urllib.parse.uses_netloc.append("foo")
@jax.jit
def f(x):
    return x * len(urllib.parse.urljoin("foo://a/b", "c"))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
