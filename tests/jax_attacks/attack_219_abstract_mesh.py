SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# mesh context set by the program is visible to the trace
import sys, contextlib
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    m = jax.sharding.get_abstract_mesh()
    return x + len(m.axis_names) * 10 + (0 if m.empty else 1)
mesh = jax.make_mesh((1,), ("data",))
ctx = jax.set_mesh(mesh) if sys.argv[1] == "1" else contextlib.nullcontext()
with ctx:
    r = f(np.ones(2, np.float32))
print("RESULT", np.asarray(r).tolist())
