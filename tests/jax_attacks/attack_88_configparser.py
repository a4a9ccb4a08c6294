SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, configparser, jax, jax.numpy as jnp, numpy as np
CFG = configparser.ConfigParser()
CFG.read_string("[model]\nscale = %s\n" % os.environ["K"])
@jax.jit
def f(x):
    return x * CFG.getfloat("model", "scale")
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
