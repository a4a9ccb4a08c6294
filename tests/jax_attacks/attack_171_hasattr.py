SPEC = {"variants": {"a": {"env": {"K": "no"}}, "b": {"env": {"K": "yes"}}}, "order": "aababba"}
# an attribute present only in one variant, probed with hasattr in the trace
import os, types, jax, jax.numpy as jnp, numpy as np
class Cfg:
    pass
CFG = Cfg()
if os.environ["K"] == "yes":
    CFG.fast = True
@jax.jit
def f(x):
    return x * (3.0 if hasattr(CFG, "fast") else 2.0)
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
