SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, enum, jax, jax.numpy as jnp, numpy as np
class Mode(enum.Enum):
    SCALE = float(os.environ["K"])   # same member name, other value
@jax.jit
def f(x):
    return x * Mode.SCALE.value
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
