SPEC = {"variants": {"a": {"files": {"k.txt": "2"}}, "b": {"files": {"k.txt": "3"}}}}
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    with open("k.txt") as fh:
        return x * float(fh.read())
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
