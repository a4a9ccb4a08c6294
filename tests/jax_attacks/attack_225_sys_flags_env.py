SPEC = {"variants": {"a": {"env": {}}, "b": {"env": {"PYTHONUTF8": "1", "PYTHONDEVMODE": "1"}}}, "order": "abba"}
# interpreter flags set by environment (utf8 mode, dev mode)
import sys
from sys import flags
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    return x + flags.utf8_mode * 10 + flags.dev_mode
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
