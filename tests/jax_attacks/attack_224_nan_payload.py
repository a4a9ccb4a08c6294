SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# Python float NaNs with the same sign but different payloads
import sys, struct
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
bits = 0x7ff8000000000000 if sys.argv[1] == "0" else 0x7ff8000000000123
G = struct.unpack("<d", struct.pack("<Q", bits))[0]
@jax.jit
def f(x):
    return x + (np.float64(G).view(np.int64) & 0xfff)
print("RESULT", np.asarray(f(np.zeros(2, np.int64))).tolist())
