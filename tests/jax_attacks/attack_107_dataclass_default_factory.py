SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# dataclass default_factory is a partial built from the environment; the instance is created inside the trace
import os, functools, dataclasses, jax, jax.numpy as jnp, numpy as np
@dataclasses.dataclass
class Cfg:
    scale: float = dataclasses.field(default_factory=functools.partial(float, os.environ["K"]))
@jax.jit
def f(x):
    return x * Cfg().scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
