SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, sys
d = os.path.abspath("venvx/lib/python3.11/site-packages"); os.makedirs(d, exist_ok=True)
open(os.path.join(d, "libk94.py"), "w").write("import os\nK = float(os.environ['K'])\ndef g(x):\n    return x * K\n")
sys.path.insert(0, d)
import jax, jax.numpy as jnp, numpy as np
import libk94
f = jax.jit(libk94.g)        # a library's function jitted directly
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
