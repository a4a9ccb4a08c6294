"""A JAX program whose jitted functions each trace differently from run to run while their code,
shapes and dtypes stay the same: each depends on one value set from outside the program (the
environment, the command line, a helper file, a static argument's field, JAX's configuration,
an installed package's global).

    python jax_trace_program.py HELPER_DIR [--scale S] [--static-field F]

Prints one JSON line: each function's output (full precision). tests/test_jax_traces.py runs it
plain and under ``compilecache run`` with one of the values changed at a time, and requires the
same output from both in every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("helper_dir")
parser.add_argument("--scale", type=float, default=2.0)
parser.add_argument("--static-field", type=int, default=1)
ARGS = parser.parse_args()
sys.path.insert(0, ARGS.helper_dir)
# An installed package's module (its directory named as pip's are), with a global from the
# environment.
sys.path.insert(0, os.path.join(ARGS.helper_dir, "site-packages"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import trace_helper  # noqa: E402  (a module the test rewrites between runs)
import trace_library  # noqa: E402  (its global SCALE is read from TRACE_LIBRARY)

from jax_trace_report import report  # noqa: E402  (beside this file)

# A module global computed from the environment.
OFFSET = float(os.environ.get("TRACE_OFFSET", "1.0"))
# A NumPy constant whose contents (not shape) come from the environment.
TABLE = np.full(3, float(os.environ.get("TRACE_TABLE", "0.5")), dtype=np.float32)


def make_scaled(scale: float):
    @jax.jit
    def scaled(x):
        return jnp.tanh(x) * scale

    return scaled


@jax.jit
def offset(x):
    return jnp.cos(x) + OFFSET


@jax.jit
def helper(x):
    return trace_helper.transform(x) * 3.0


@jax.jit
def table(x):
    return x * jnp.asarray(TABLE).sum()


@dataclasses.dataclass(frozen=True)
class Static:
    factor: int
    name: str = "s"


@jax.jit
def with_default(x, power=int(os.environ.get("TRACE_POWER", "2"))):  # noqa: B008
    return x**power


def static_fn(x, cfg: Static):
    return x * cfg.factor + len(cfg.name)


static_jit = jax.jit(static_fn, static_argnums=1)


@jax.jit
def library(x):
    return trace_library.scaled(x) + 1.0


@jax.jit
def precision(x):
    # float32 or float64 depending on jax_enable_x64, set from the environment (JAX_ENABLE_X64).
    return (x / 3.0).astype(jnp.asarray(1.0).dtype) * 1.0000001


def main() -> None:
    x = jnp.linspace(0.1, 1.0, 3)
    results = {
        "scaled": make_scaled(ARGS.scale)(x),
        "offset": offset(x),
        "helper": helper(x),
        "table": table(x),
        "with_default": with_default(x),
        "static": static_jit(x, Static(ARGS.static_field)),
        "precision": precision(x),
        "library": library(x),
    }
    output = {
        name: [repr(float(v)) for v in np.asarray(out).ravel()] for name, out in results.items()
    }
    output["dtype"] = [str(results["precision"].dtype)]
    report(output)


main()
