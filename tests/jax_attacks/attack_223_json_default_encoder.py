SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["2"]}}, "order": "abba"}
# stdlib module global json._default_encoder replaced by the program
import sys, json
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] != "0":
    json._default_encoder = json.JSONEncoder(indent=int(sys.argv[1]))
@jax.jit
def f(x):
    return x * len(json.dumps({"a": [1, 2]}))
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
