SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
# a global named only inside a string annotation, evaluated by inspect (stdlib eval) during the trace
import os, inspect, jax, jax.numpy as jnp, numpy as np
HIDDEN_SCALE = float(os.environ["K"])
def marker(x) -> "HIDDEN_SCALE":
    pass
@jax.jit
def f(x):
    return x * inspect.get_annotations(marker, eval_str=True)["return"]
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
