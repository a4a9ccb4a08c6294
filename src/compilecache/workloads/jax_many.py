"""A JAX workload of many small jitted functions: a program that asks the cache for many entries.

    python -m compilecache.workloads.jax_many --count 120 [--json]

Function ``i`` (of ``--count``) is a distinct tiny jitted function: one of eight bodies (chains
of elementwise ops, a reduction, a matmul, a cumulative sum, ...), a constant derived from ``i``
baked into it and an input of its own shape, so every function is its own XLA module and its own
persistent-cache key. The functions are compiled and run one after another, in order, as a
program's first steps would ask for them; the script prints one JSON line::

    {"count": 120, "first_calls_s": 14.2, "total_s": 15.9, "checksum": 1234.5, "digest": "..."}

``first_calls_s`` runs from just before the first call to the end of the last one (trace,
lowering, compile or persistent-cache load, execution of all of them); ``total_s`` from the
import of this module. ``checksum`` and ``digest`` (SHA-256 of every output's bytes) let runs be
compared for identical results. Inputs are built with NumPy, so the functions are the only XLA
compiles. Like the other workloads, this module never imports compilecache.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before the heavy imports: total_s includes importing JAX

import argparse  # noqa: E402
import hashlib  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

BODIES = 8


def _jax(name: str = "jax") -> Any:
    return importlib.import_module(name)


def make_function(i: int) -> tuple[Callable[[Any], Any], Any]:
    """Function ``i`` (jitted) and its input: the body is ``i % 8``, the constant and the shape
    follow ``i``, so no two functions share a cache key."""
    jax, jnp = _jax(), _jax("jax.numpy")
    c = np.float32(1.0 + 0.01 * i)
    n = 8 + i % 17
    m = 4 + (i // 17) % 7
    body = i % BODIES

    def f(x: Any) -> Any:
        if body == 0:
            return jnp.sin(x * c) + jnp.cos(x)
        if body == 1:
            return jnp.tanh(x @ x.T * c).sum(axis=0)
        if body == 2:
            return jnp.cumsum(x * c, axis=-1) - x
        if body == 3:
            return jnp.exp(-jnp.abs(x)) * c + jnp.max(x)
        if body == 4:
            return jax.nn.softmax(x * c, axis=-1)
        if body == 5:
            return jnp.sqrt(x * x + c).mean(axis=-1)
        if body == 6:
            return jnp.where(x > 0, x * c, x / c)
        return jnp.sort(x * c, axis=-1)[..., ::-1]

    rng = np.random.default_rng(i)
    x = rng.standard_normal((n, m)).astype(np.float32)
    return jax.jit(f), x


def run(count: int) -> dict[str, Any]:
    jax = _jax()
    functions = [make_function(i) for i in range(count)]
    inputs = [jax.device_put(x) for _, x in functions]
    start, start_cpu = time.perf_counter(), time.process_time()
    outputs = []
    for (f, _), x in zip(functions, inputs, strict=True):
        outputs.append(f(x))
    jax.block_until_ready(outputs)
    first_calls_s = time.perf_counter() - start
    first_calls_cpu_s = time.process_time() - start_cpu
    digest = hashlib.sha256()
    checksum = 0.0
    for k, out in enumerate(outputs):
        arr = np.asarray(out)
        digest.update(arr.tobytes())
        checksum += float(np.sum(arr.astype(np.float64))) * (k + 1)
    return {
        "count": count,
        "first_calls_s": first_calls_s,
        "first_calls_cpu_s": first_calls_cpu_s,
        "total_s": time.perf_counter() - _T0,
        "total_cpu_s": time.process_time(),
        "checksum": checksum,
        "digest": digest.hexdigest(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compilecache.workloads.jax_many",
        description="Compile and run many small distinct jitted functions; print a JSON line.",
    )
    parser.add_argument("--count", type=int, default=120, help="functions (default 120)")
    parser.add_argument("--json", action="store_true", help="print the JSON line only")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    result = run(args.count)
    if not args.json:
        print(
            f"# {args.count} functions: first calls {result['first_calls_s']:.3f} s, "
            f"total {result['total_s']:.3f} s",
            file=sys.stderr,
        )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
