SPEC = {"variants": {"a": {"env": {"LC_ALL": "C"}}, "b": {"env": {"LC_ALL": "C.UTF-8"}}}}
# the program adopts the user's locale (setlocale(LC_ALL, "")), the trace reads it through locale
import locale, jax, jax.numpy as jnp, numpy as np
locale.setlocale(locale.LC_ALL, "")
@jax.jit
def f(x):
    return x * float(len(str(locale.getlocale())))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
