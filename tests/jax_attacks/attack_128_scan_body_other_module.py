SPEC = {"variants": {"a": {"env": {"K": "2"}, "files": {"body128.py": "STEP = 1.0\ndef body(c, x):\n    return c * STEP + x, c\n"}, "mtime": {"body128.py": 1700000000}},
                     "b": {"env": {"K": "3"}, "files": {"body128.py": "STEP = 1.0\ndef body(c, x):\n    return c * STEP + x, c\n"}, "mtime": {"body128.py": 1700000000}}}}
# lax.scan body lives in another (unchanged) module whose global the program sets before the call
import os, jax, jax.numpy as jnp, numpy as np
import body128
body128.STEP = float(os.environ["K"])
@jax.jit
def f(x):
    c, ys = jax.lax.scan(body128.body, 1.0, x)
    return ys + c
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
