SPEC = {"variants": {"a": {"env": {"PYTHONHASHSEED": "1"}}, "b": {"env": {"PYTHONHASHSEED": "2"}}}}
import jax, jax.numpy as jnp, numpy as np
OPS = {"add", "mul", "sub", "sin", "exp"}   # equal sets, iteration order depends on the hash seed
@jax.jit
def f(x):
    for op in OPS:
        if op == "add": x = x + 1.5
        elif op == "mul": x = x * 3.0
        elif op == "sub": x = x - 0.25
        elif op == "sin": x = jnp.sin(x)
        elif op == "exp": x = x * 0.5 + 2
    return x
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
