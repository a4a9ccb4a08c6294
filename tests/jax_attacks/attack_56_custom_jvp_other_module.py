SPEC = {"variants": {"a": {"env": {"K": "2"}}, "b": {"env": {"K": "3"}}}}
import os, jax, jax.numpy as jnp, numpy as np
open("rules56.py", "w").write(
    "import os, jax, jax.numpy as jnp\nK = float(os.environ['K'])\n"
    "@jax.custom_jvp\ndef act(x):\n    return jnp.sin(x)\n"
    "@act.defjvp\ndef act_jvp(p, t):\n    (x,), (dx,) = p, t\n    return act(x), dx * K\n")
import rules56
f = jax.jit(jax.grad(lambda x: rules56.act(x).sum()))
print("RESULT", repr(np.asarray(f(jnp.arange(3.0))).tolist()))
