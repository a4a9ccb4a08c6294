SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"venvx/lib/python3.11/site-packages/libk53.py": "import os\nK = float(os.environ['K'])\ndef g(x):\n    return x * K\n"}}, "b": {"env": {"K": "3"}, "files": {"venvx/lib/python3.11/site-packages/libk53.py": "import os\nK = float(os.environ['K'])\ndef g(x):\n    return x * K\n"}}}}
import os, sys
d = os.path.abspath("venvx/lib/python3.11/site-packages"); os.makedirs(d, exist_ok=True)
sys.path.insert(0, d)
import jax, jax.numpy as jnp, numpy as np
import libk53
@jax.jit
def f(x):
    return libk53.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
