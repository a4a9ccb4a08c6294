SPEC = {"variants": {"a": {"args": ["--scale", "2"]}, "b": {"args": ["--scale", "3"]}}}
import argparse, jax, jax.numpy as jnp, numpy as np
parser = argparse.ArgumentParser()
parser.add_argument("--scale", type=float, default=1.0)
args = parser.parse_args()             # the most common way a script gets its settings
@jax.jit
def f(x):
    return x * args.scale
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
