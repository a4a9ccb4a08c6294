SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import jax, jax.numpy as jnp, numpy as np
class State: pass
STATE = State(); STATE.traces = 0
@jax.jit
def f(x):
    STATE.traces += 1               # trace-time side effect on an object's attribute
    return x * 2
out = f(jnp.arange(3.0))
print("RESULT", repr(np.asarray(out).tolist()), "traces", STATE.traces)
