SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# signal disposition (process state) read inside the trace
import sys, signal
import numpy as np, jax, jax.numpy as jnp
signal.signal(signal.SIGUSR2, signal.SIG_IGN if sys.argv[1] == "1" else signal.SIG_DFL)
@jax.jit
def f(x):
    return x + (10.0 if signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN else 1.0)
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
