SPEC = {"variants": {"a": {"env": {"ADV": "A"}}, "b": {"env": {"ADV": "B"}}}}
# one process rebinds copy.deepcopy, which dataclasses.astuple calls
import os, copy, dataclasses, jax, jax.numpy as jnp
if os.environ["ADV"] == "B":
    _orig = copy.deepcopy
    def _dc(o, memo=None):
        return o * 2 if isinstance(o, float) else _orig(o, memo)
    copy.deepcopy = _dc     # dataclasses.astuple deep-copies each field
@dataclasses.dataclass
class Cfg:
    s: float = 1.5
C = Cfg()
@jax.jit
def f(x):
    (s,) = dataclasses.astuple(C)
    return x * s
print("RESULT", f(jnp.arange(3.0)).tolist())
