SPEC = {"variants": {"a": {"env": {"PYTHONHASHSEED": "1"}}, "b": {"env": {"PYTHONHASHSEED": "2"}}}}
import functools, jax, jax.numpy as jnp, numpy as np
@functools.partial(jax.jit, static_argnums=1)
def f(x, ops):
    for op in ops:
        x = x + 1.5 if op == "add" else x * 3.0 if op == "mul" else jnp.sin(x) if op == "sin" else x - 0.25
    return x
print("RESULT", repr(np.asarray(f(jnp.arange(3.0), frozenset({"add", "mul", "sin", "sub"}))).tolist()))
