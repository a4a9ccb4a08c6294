SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import jax, jax.numpy as jnp, numpy as np
TRACED = []
@jax.jit
def f(x):
    TRACED.append(x.shape)     # a trace-time side effect the program reports
    print("RESULT tracing f")
    return x * 2
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()), "traced", len(TRACED))
