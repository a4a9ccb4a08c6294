SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# an ABC virtual-subclass registration changes an isinstance check in the trace
import os, abc, jax, jax.numpy as jnp, numpy as np
class Scalar(abc.ABC):
    pass
if os.environ["K"] == "3":
    Scalar.register(float)
@jax.jit
def f(x):
    return x * (3.0 if isinstance(1.5, Scalar) else 2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
