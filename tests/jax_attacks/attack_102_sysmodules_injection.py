SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a module object built at runtime and injected into sys.modules, then imported normally
import os, sys, types, jax, jax.numpy as jnp, numpy as np
m = types.ModuleType("cfgmod102")
m.SCALE = float(os.environ["K"])
sys.modules["cfgmod102"] = m
import cfgmod102
@jax.jit
def f(x):
    return x * cfgmod102.SCALE
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
