SPEC = {"variants": {"a": {"args": ["utf-8"]}, "b": {"args": ["utf-16"]}}}
# a codec alias registered from argv (search function is a builtin dict.get)
import sys, codecs, jax, jax.numpy as jnp, numpy as np
codecs.register({"appenc": codecs.lookup(sys.argv[1])}.get)
@jax.jit
def f(x):
    return x * float(len("abc".encode("appenc")))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
