SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, sys, jax, jax.numpy as jnp, numpy as np
open("nodes26.py", "w").write(
    "import os, jax\nSCALE = float(os.environ['K'])\n"
    "class Node:\n    def __init__(self, v): self.v = v\n"
    "jax.tree_util.register_pytree_node(Node, lambda n: ((n.v,), None), lambda aux, ch: Node(ch[0] * SCALE))\n")
import nodes26
@jax.jit
def f(n):
    return n.v + 1
print("RESULT", repr(np.asarray(f(nodes26.Node(jnp.arange(3.0)))).tolist()))
