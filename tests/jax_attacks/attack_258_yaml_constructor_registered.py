SPEC = {"variants": {"a": {"env": {"ADV": "A"}}, "b": {"env": {"ADV": "B"}}}}
# one process registers a constructor on yaml.SafeLoader; the trace loads YAML
import os, yaml, jax, jax.numpy as jnp
if os.environ["ADV"] == "B":
    def _dbl(loader, node):
        return 2 * float(loader.construct_scalar(node))
    yaml.SafeLoader.add_constructor("tag:yaml.org,2002:float", _dbl)
CFG_TEXT = "s: 1.5\n"
@jax.jit
def f(x):
    return x * yaml.safe_load(CFG_TEXT)["s"]
print("RESULT", f(jnp.arange(3.0)).tolist())
