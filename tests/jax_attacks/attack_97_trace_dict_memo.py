SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import jax, jax.numpy as jnp, numpy as np
SHAPES = {}
@jax.jit
def f(x):
    SHAPES[str(x.shape)] = str(x.dtype)     # a registry filled while tracing
    return x * 2
out = f(jnp.arange(3.0))
print("RESULT", repr(np.asarray(out).tolist()), "registry", sorted(SHAPES.items()))
