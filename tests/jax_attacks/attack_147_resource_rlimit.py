SPEC = {"variants": {"a": {"args": ["200"]}, "b": {"args": ["300"]}}}
# process rlimit set from argv, read in the trace
import sys, resource, jax, jax.numpy as jnp, numpy as np
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
@jax.jit
def f(x):
    return x * float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
