SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a global reached via inspect.getmodule(f) + operator.attrgetter with a computed name
import os, inspect, operator, jax, jax.numpy as jnp, numpy as np
SECRET_SCALE = float(os.environ["K"])
def anchor():
    pass
@jax.jit
def f(x):
    mod = inspect.getmodule(anchor)
    return x * operator.attrgetter("SECRET_" + "SCALE")(mod)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
