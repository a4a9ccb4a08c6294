SPEC = {"variants": {"a": {"env": {"PYTHONHASHSEED": "1"}}, "b": {"env": {"PYTHONHASHSEED": "2"}}}}
import jax, jax.numpy as jnp, numpy as np
def make():
    ops = {"add", "mul", "sin", "sub"}
    def f(x):
        for op in ops:
            x = x + 1.5 if op == "add" else x * 3.0 if op == "mul" else jnp.sin(x) if op == "sin" else x - 0.25
        return x
    return f
f = jax.jit(make())
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
