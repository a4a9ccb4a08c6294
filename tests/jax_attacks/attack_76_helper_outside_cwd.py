SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, sys
d = "/tmp/attack76_lib"; os.makedirs(d, exist_ok=True)
open(os.path.join(d, "helper76.py"), "w").write("def g(x):\n    return x * %s.0\n" % os.environ["K"])
sys.path.insert(0, d)
import jax, jax.numpy as jnp, numpy as np
import helper76
@jax.jit
def f(x):
    return helper76.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
