SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# flush-to-zero / denormals-are-zero set in MXCSR via fesetenv changes trace-time float arithmetic
import sys, ctypes, ctypes.util, struct
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
if sys.argv[1] == "1":
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    env = ctypes.create_string_buffer(32)
    libm.fegetenv(env)
    struct.pack_into("<I", env, 28, struct.unpack_from("<I", env.raw, 28)[0] | 0x8040)
    libm.fesetenv(env)
@jax.jit
def f(x):
    c = 1e-300 * 1e-10 * float(len("ab"))
    return x * 0.0 + c * 1e300
print("RESULT", float(np.asarray(f(np.ones(1, np.float64)))[0]).hex())
