SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["6"]}}}
# calendar's module-level calendar instance configured from argv
import sys, calendar, jax, jax.numpy as jnp, numpy as np
calendar.setfirstweekday(int(sys.argv[1]))
@jax.jit
def f(x):
    return x + float(calendar.firstweekday())
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
