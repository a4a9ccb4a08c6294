SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# structured arrays with identical bytes, dtype.str ('|V8') and field formats; only field offsets differ
import sys
import numpy as np, jax, jax.numpy as jnp
offs = [0, 4] if sys.argv[1] == "0" else [4, 0]
DT = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<i4"], "offsets": offs, "itemsize": 8})
A = np.frombuffer(np.array([1, 2], dtype="<i4").tobytes(), dtype=DT)
@jax.jit
def f(x):
    return x * int(A["a"][0])
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
