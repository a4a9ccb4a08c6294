SPEC = {"variants": {"a": {"env": {"ATK_SCALE": "2"}}, "b": {"env": {"ATK_SCALE": "3"}}}, "order": "abba"}
# env read through os.environb / posix.environ instead of os.environ
import os, posix
import numpy as np, jax, jax.numpy as jnp
@jax.jit
def f(x):
    return x * float(os.environb.get(b"ATK_SCALE", b"1")) + 10 * float(posix.environ.get(b"ATK_SCALE", b"1"))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
