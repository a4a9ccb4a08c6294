"""Where a JAX warm start of one large executable goes: tracing, lowering and compiling the
12-layer step once, then deserialising its serialised executable (what any persistent cache
that loads it pays), in one process.

    python benchmarks/profile_jax_step_load.py [--layers 12] [--loads 3]

Prints one JSON line: ``trace_s``, ``lower_s``, ``compile_s``, ``executable_mb`` and
``deserialise_s`` (one value per load). A warm start that skips tracing and lowering still
waits for the deserialisation.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from compilecache.workloads import jax_step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--loads", type=int, default=3)
    args = parser.parse_args()
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    params = jax_step.init_params(args.layers)
    inputs, targets = jax_step.make_batch()
    step = jax_step.make_train_step(args.layers)
    start = time.perf_counter()
    traced = step.trace(params, inputs, targets)
    trace_s = time.perf_counter() - start
    start = time.perf_counter()
    lowered = traced.lower()
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    backend: Any = xla_bridge.get_backend("cpu")
    blob = backend.serialize_executable(compiled._executable.xla_executable)
    devices = xla_client.DeviceList(tuple(backend.devices()[:1]))
    loads = []
    for _ in range(args.loads):
        start = time.perf_counter()
        backend.deserialize_executable(blob, devices, None)
        loads.append(round(time.perf_counter() - start, 3))
    print(
        json.dumps(
            {
                "layers": args.layers,
                "trace_s": round(trace_s, 3),
                "lower_s": round(lower_s, 3),
                "compile_s": round(compile_s, 2),
                "executable_mb": round(len(blob) / 1e6, 1),
                "deserialise_s": loads,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
