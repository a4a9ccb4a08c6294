SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"envhelp100.py": "import os\ndef scale():\n    return float(os.getenv('K'))\n"}, "mtime": {"envhelp100.py": 1700000000}},
                     "b": {"env": {"K": "3"}, "files": {"envhelp100.py": "import os\ndef scale():\n    return float(os.getenv('K'))\n"}, "mtime": {"envhelp100.py": 1700000000}}}}
# a property on a global object routes to os.getenv in another program module
import jax, jax.numpy as jnp, numpy as np
import envhelp100
class Cfg:
    @property
    def scale(self):
        return envhelp100.scale()
CFG = Cfg()
@jax.jit
def f(x):
    return x * CFG.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
