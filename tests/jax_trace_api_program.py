"""JAX's own APIs around jitted functions whose traces compilecache may serve: the first call,
then ``.lower()``, ``.trace()``, ``.eval_shape()``, AOT ``.compile()``, a jit inside ``grad``,
``vmap`` and ``scan``, donation, and a Python side effect at trace time. Prints one JSON line
(the results at full precision, and what JAX said); tests/test_jax_traces.py compares it with
the plain program's.

    python jax_trace_api_program.py [--log-compiles]
"""

from __future__ import annotations

import logging
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jax_trace_report import report  # beside this file

LOG_COMPILES = "--log-compiles" in sys.argv
if LOG_COMPILES:
    jax.config.update("jax_log_compiles", True)
    logging.basicConfig(level=logging.WARNING)

TRACED: list[str] = []  # what ran at trace time: a global the trace changes


@jax.jit
def step(w, x):
    TRACED.append("step")
    return jnp.tanh(x @ w).sum() * 2.0


@jax.jit
def printed(x):
    print("tracing printed")  # runs when JAX traces: not on a warm start served its trace
    return x + 1.0


@jax.jit
def inner(x):
    return jnp.sin(x) * 3.0


def loss(x):
    return inner(x).sum()


donating = jax.jit(lambda x, y: x * 2.0 + y, donate_argnums=(0,))


def _values(tree: object) -> list[str]:
    return [repr(float(v)) for leaf in jax.tree.leaves(tree) for v in np.asarray(leaf).ravel()]


def main() -> None:
    w = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    x = jnp.linspace(0.5, 2.0, 8).reshape(2, 4)
    out: dict[str, object] = {}
    out["first_call"] = _values(step(w, x))
    out["second_call"] = _values(step(w, x + 1.0))
    out["lower"] = (
        "stablehlo" in step.lower(w, x).as_text()[:2000].lower()
        or "module" in (step.lower(w, x).as_text()[:200])
    )
    out["trace_out"] = str(step.trace(w, x).out_info)
    out["eval_shape"] = str(step.eval_shape(w, x))
    out["aot"] = _values(step.lower(w, x).compile()(w, x))
    v = jnp.linspace(0.0, 1.0, 5)
    out["inner_first"] = _values(inner(v))
    out["grad"] = _values(jax.grad(loss)(v))
    out["vmap"] = _values(jax.vmap(inner)(jnp.stack([v, v + 1.0])))
    out["scan"] = _values(jax.lax.scan(lambda c, e: (c + inner(e).sum(), c), 0.0, v)[0])
    donated = jnp.arange(4.0)
    out["donate"] = _values(donating(donated, jnp.ones(4)))
    out["donated_deleted"] = bool(donated.is_deleted())
    out["printed"] = _values(printed(v)) + _values(printed(v * 2.0))
    # LAPACK's kernels: readied by the lowering a served trace skips (a crash if they are not).
    out["qr"] = _values(jax.jit(jnp.linalg.qr)(w @ w.T + jnp.eye(4)))
    out["traced"] = list(TRACED)
    report(out)


main()
