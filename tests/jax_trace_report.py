"""What the trace programs (jax_trace_program.py, jax_trace_api_program.py) print last: their
results and compilecache's trace counters of the process, as one JSON line."""

from __future__ import annotations

import json


def report(output: dict[str, object]) -> None:
    print(json.dumps({"output": output, "traces": trace_counters()}))


def trace_counters() -> dict[str, float]:
    """compilecache's trace counters of this process (empty without compilecache)."""
    try:
        import compilecache
    except ImportError:
        return {}
    session = compilecache.active()
    if session is None:
        return {}
    return {k: v for k, v in session.stats().items() if k.startswith("jax.trace.")}
