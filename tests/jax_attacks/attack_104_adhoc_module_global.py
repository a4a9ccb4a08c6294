SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a ModuleType used as a config namespace (never in sys.modules)
import os, types, jax, jax.numpy as jnp, numpy as np
cfg = types.ModuleType("cfg")
cfg.scale = float(os.environ["K"])
@jax.jit
def f(x):
    return x * cfg.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
