SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# two equal sets ({8,16} == {16,8}) iterate in different orders (hash collision, insertion order)
import sys
import numpy as np, jax, jax.numpy as jnp
S = set()
for v in ([8, 16] if sys.argv[1] == "0" else [16, 8]):
    S.add(v)
@jax.jit
def f(x):
    return x * next(iter(S))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
