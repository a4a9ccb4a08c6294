SPEC = {"variants": {"a": {"args": ["text/x-a"]}, "b": {"args": ["application/x-bb"]}}}
# a mimetypes registration made from argv before the jit call
import sys, mimetypes, jax, jax.numpy as jnp, numpy as np
mimetypes.add_type(sys.argv[1], ".zz9")
@jax.jit
def f(x):
    return x * float(len(mimetypes.guess_type("data.zz9")[0]))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
