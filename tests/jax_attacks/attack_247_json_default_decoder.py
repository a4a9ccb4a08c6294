SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# json._default_decoder replaced (parse_int=float) -> json.loads result type changes
import sys, json
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "1":
    json._default_decoder = json.JSONDecoder(parse_int=lambda s: int(s) * 10)
@jax.jit
def f(x):
    return x * json.loads("[2]")[0]
print("RESULT", np.asarray(f(np.ones(2, np.float32))).tolist())
