SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# copy module's type dispatch table changed by the program
import sys, copy
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "1":
    copy._deepcopy_dispatch[list] = lambda x, memo, deepcopy=None: x + [0]
L = [1, 2]
@jax.jit
def f(x):
    return x * len(copy.deepcopy(L))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
