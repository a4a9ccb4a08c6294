SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# copyreg dispatch table entry (a builtin dict.get holding an env value) decides what copy.copy returns in the trace
import os, copy, copyreg, jax, jax.numpy as jnp, numpy as np
class Cfg:
    def __init__(self, scale):
        self.scale = scale
CFG = Cfg(1.0)
copyreg.pickle(Cfg, {CFG: (Cfg, (float(os.environ["K"]),))}.get)
@jax.jit
def f(x):
    return x * copy.copy(CFG).scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
