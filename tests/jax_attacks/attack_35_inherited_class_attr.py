SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
open("base35.py", "w").write("import os\nclass Base:\n    k = float(os.environ['K'])\n")
from base35 import Base
class Impl(Base):
    pass
@jax.jit
def f(x):
    return x * Impl.k
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
