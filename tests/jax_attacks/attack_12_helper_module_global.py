SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}},
        }
import os, sys, jax, jax.numpy as jnp, numpy as np
open("helper12.py", "w").write("import os\nK = float(os.environ['K'])\ndef g(x):\n    return x * K\n")
import helper12
@jax.jit
def f(x):
    return helper12.g(x) + helper12.K
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
