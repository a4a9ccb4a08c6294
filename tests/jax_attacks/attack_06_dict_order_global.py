SPEC = {"variants": {"a": {"env": {"ORDER": "ab"}}, "b": {"env": {"ORDER": "ba"}}}}
import os, jax, jax.numpy as jnp, numpy as np
ITEMS = {"a": ("add", 1.0), "b": ("mul", 3.0)}
D = {k: ITEMS[k] for k in os.environ["ORDER"]}   # equal dicts, different order
@jax.jit
def f(x):
    for k, (op, v) in D.items():
        x = x + v if op == "add" else x * v
    return x
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
