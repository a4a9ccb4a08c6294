SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# trace reads the line number of its call site in the program
import sys
from sys import _getframe
import numpy as np, jax, jax.numpy as jnp
def site():
    fr = _getframe()
    while fr is not None:
        if fr.f_code.co_filename.endswith("prog.py") and fr.f_code.co_name == "<module>":
            return fr.f_lineno
        fr = fr.f_back
    return 0
@jax.jit
def f(x):
    return x + site()
x = np.ones(2, np.float32)
if sys.argv[1] == "0":
    r = f(x)
else:
    r = f(x)
print("RESULT", np.asarray(r).tolist())
