"""What JAX's own code looks up by name, changed by the program, for ``test_jax_traces.py``:
with ``PATCH=1`` this process lowers ``sin`` as ``cos`` (a lowering rule of its own) and binds
``jax._src.lax.lax.mul`` to ``add`` (``*`` then adds); with ``OWN_RULE=1`` it lowers ``exp``
with a rule of its own that reads a global. Prints the results and the trace counters."""

from __future__ import annotations

import os

import jax
import jax._src.lax.lax as lax_internal
import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import mlir

from jax_trace_report import report  # beside this file

FACTOR = float(os.environ.get("FACTOR", "2.0"))
if os.environ.get("PATCH") == "1":
    mlir.register_lowering(
        lax_internal.sin_p,
        mlir.lower_fun(lambda x, **_: lax_internal.cos(x), multiple_results=False),
    )
    lax_internal.mul = lax_internal.add
if os.environ.get("OWN_RULE") == "1":

    def _scaled_exp(ctx, x, **_):  # type: ignore[no-untyped-def]
        def scaled(y):  # type: ignore[no-untyped-def]
            e = lax_internal.pow(lax_internal.full_like(y, 2.718281828), y)  # not exp: its rule
            return lax_internal.mul(e, lax_internal.full_like(y, FACTOR))

        return mlir.lower_fun(scaled, multiple_results=False)(ctx, x)

    mlir.register_lowering(lax_internal.exp_p, _scaled_exp, platform="cpu")


@jax.jit
def sine(x):  # type: ignore[no-untyped-def]
    return jnp.sin(x)


@jax.jit
def tripled(x):  # type: ignore[no-untyped-def]
    return x * 3.0


@jax.jit
def exponential(x):  # type: ignore[no-untyped-def]
    return jnp.exp(x)


x = jnp.arange(3.0)
report({f.__name__: np.asarray(f(x)).round(5).tolist() for f in (sine, tripled, exponential)})
