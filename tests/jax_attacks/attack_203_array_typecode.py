SPEC = {"variants": {"a": {"args": ["i"]}, "b": {"args": ["q"]}}, "order": "abba"}
# array('i',[1,2]) == array('q',[1,2]) but itemsize differs
import sys
from array import array
import numpy as np, jax, jax.numpy as jnp
A = array(sys.argv[1], [1, 2])
@jax.jit
def f(x):
    return x * A.itemsize
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
