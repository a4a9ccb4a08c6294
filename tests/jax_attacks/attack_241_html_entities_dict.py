SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# stdlib module-level dict (html.entities.html5) mutated in place, read indirectly by html.unescape
import sys, html, html.entities
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "1":
    html.entities.html5["amp;"] = "AND"
@jax.jit
def f(x):
    return x * len(html.unescape("&amp;"))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
