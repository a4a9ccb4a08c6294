SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, dataclasses, functools, jax, jax.numpy as jnp, numpy as np
@dataclasses.dataclass(frozen=True)
class Cfg:
    name: str
    k: float = dataclasses.field(default=1.0, compare=False, repr=False)
@functools.partial(jax.jit, static_argnums=1)
def f(x, cfg):
    return x * cfg.k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0), Cfg("m", float(os.environ["K"])))).tolist()))
