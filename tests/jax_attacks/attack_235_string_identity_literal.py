SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# global string equal to a code constant, identical object or not
import sys
import numpy as np, jax, jax.numpy as jnp
G = "abc.d" if sys.argv[1] == "0" else "".join(["abc", ".d"])
@jax.jit
def f(x):
    k = "abc.d"
    return x + (10.0 if G is k else 1.0)
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
