SPEC = {"variants": {"a": {"args": ["ab"]}, "b": {"args": ["abcd"]}}, "order": "abba"}
# gettext's current text domain (module state) set by the program
import sys, gettext
import numpy as np, jax, jax.numpy as jnp
gettext.textdomain(sys.argv[1])
@jax.jit
def f(x):
    return x * len(gettext.textdomain())
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
