SPEC = {"variants": {"a": {"env": {"PYTHONHASHSEED": "1"}}, "b": {"env": {"PYTHONHASHSEED": "2"}}}}
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    # the frozenset constant in the code is the same; its order is not
    for op in {"add", "mul", "sub", "sin", "exp"}:
        if op == "add": x = x + 1.5
        elif op == "mul": x = x * 3.0
        elif op == "sub": x = x - 0.25
        elif op == "sin": x = jnp.sin(x)
        elif op == "exp": x = x * 0.5 + 2
    return x
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
