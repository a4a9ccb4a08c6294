SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# FPU rounding mode set via ctypes changes trace-time Python float constants
import sys, ctypes, ctypes.util
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
libm = ctypes.CDLL(ctypes.util.find_library("m"))
if sys.argv[1] == "1":
    libm.fesetround(0x800)  # FE_UPWARD
@jax.jit
def f(x):
    c = 1.0 / float(len("abc"))
    return x * 0.0 + c
r = float(np.asarray(f(np.ones(1, np.float64)))[0])
print("RESULT", r.hex())
