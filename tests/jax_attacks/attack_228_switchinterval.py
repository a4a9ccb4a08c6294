SPEC = {"variants": {"a": {"args": ["0.005"]}, "b": {"args": ["0.5"]}}, "order": "abba"}
# interpreter state sys.getswitchinterval set by the program
import sys
from sys import getswitchinterval
import numpy as np, jax, jax.numpy as jnp
sys.setswitchinterval(float(sys.argv[1]))
@jax.jit
def f(x):
    return x + getswitchinterval()
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
