SPEC = {"variants": {"a": {"env": {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}}, "b": {"env": {"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}}}}
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x):
    return x * jax.device_count()
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
