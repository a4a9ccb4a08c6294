SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"py/dist-packages/libk77.py": "import os\nK = float(os.environ['K'])\ndef g(x):\n    return x * K\n"}}, "b": {"env": {"K": "3"}, "files": {"py/dist-packages/libk77.py": "import os\nK = float(os.environ['K'])\ndef g(x):\n    return x * K\n"}}}}
import os, sys
d = os.path.abspath("py/dist-packages"); os.makedirs(d, exist_ok=True)
sys.path.insert(0, d)
import jax, jax.numpy as jnp, numpy as np
import libk77
@jax.jit
def f(x):
    return libk77.g(x) + 1
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
