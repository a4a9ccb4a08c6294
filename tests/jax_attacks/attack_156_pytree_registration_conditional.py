SPEC = {"variants": {"a": {"env": {"K": "leaf"}}, "b": {"env": {"K": "node"}}}}
# a class registered as a pytree node in one variant only; the trace counts leaves of a constant
import os, jax, jax.numpy as jnp, numpy as np
class Pair:
    def __init__(self):
        self.a, self.b = 1.0, 2.0
if os.environ["K"] == "node":
    jax.tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair())
PAIR = Pair()
@jax.jit
def f(x):
    return x * float(len(jax.tree_util.tree_leaves(PAIR)))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
