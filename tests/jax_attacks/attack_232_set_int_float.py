SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# {1} == {1.0} == {True}: the element kept is whichever was inserted first
import sys
import numpy as np, jax, jax.numpy as jnp
S = set()
for v in ([1, 1.0, True] if sys.argv[1] == "0" else [1.0, True, 1]):
    S.add(v)
@jax.jit
def f(x):
    return x + len(repr(next(iter(S))))
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())
