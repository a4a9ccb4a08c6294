"""Counters: per process, per framework, and their persistent merge into a store.

Counters are a flat ``{name: float}`` mapping so that every store can keep them (SQLite rows,
Redis hash fields): the totals are ``hits``, ``misses``, ... and each framework has its own copy
under ``jax.hits``, ``torch.misses`` and so on. Deeper counters share the mapping under their own
prefixes: ``fn.<framework>.<function>.<counter>`` per function (hits, misses, writes,
compile_time_s, compile_time_saved_s) and ``level.<url>.<counter>`` per level of a tiered store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from compilecache.run_summary import Summary

__all__ = ["Summary"]  # re-exported: the summary line lives in its own (import-free) module

# The headline counts of events (``stats --json`` shows them as integers).
EVENT_COUNTERS = (
    "hits",
    "misses",
    "writes",
    "errors",
    "corrupt",
    "foreign",
    "unrunnable",
    "skipped",
)
COUNTERS = (
    *EVENT_COUNTERS,
    "bytes_read",
    "bytes_written",
    "compile_time_s",
    "compile_time_saved_s",
    "load_time_s",
    "waited",
    "wait_time_s",
    "lease_takeovers",
    "wait_timeouts",
    "unwritten_skips",
)
# torch answers that are not compiles (frameworks/torch/probes.py), as ``torch.<name>``: kept
# apart from the totals above, which count compiles.
TORCH_PROBE_COUNTERS = (
    "isa_probe_hits",
    "isa_probe_misses",
    "compiler_check_hits",
    "compiler_check_misses",
    "probe_writes",
    "probe_errors",
    "probe_time_saved_s",
)
# Graphs torch's own local directory served (frameworks/torch/integration.py): ``torch.fx.local_hits``,
# ``torch.aot.local_hits``; they are also hits of the level ``level.torch-local.hits``.
TORCH_LOCAL_LEVEL = "torch-local"


class Stats:
    """Thread-safe counters of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}
        # Told the name of each counter added to, after the lock is released (a session under
        # ``compilecache run`` reports its counts as they grow); it must not raise.
        self.listener: Callable[[str], None] | None = None

    def add(self, name: str, value: float = 1.0, framework: str = "") -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0.0) + value
            if framework:
                scoped = f"{framework}.{name}"
                self._values[scoped] = self._values.get(scoped, 0.0) + value
        listener = self.listener
        if listener is not None:
            listener(name)

    def snapshot(self) -> dict[str, float]:
        """Every counter, the totals always present (zero when untouched)."""
        with self._lock:
            values = dict(self._values)
        for name in COUNTERS:
            values.setdefault(name, 0.0)
        return values

    def take(self) -> dict[str, float]:
        """Return the counters and reset them (what an exit hook merges into the store)."""
        with self._lock:
            values, self._values = self._values, {}
        return values


def is_count(name: str) -> bool:
    """Whether counter ``name`` counts things (events, entries, bytes): a whole number. Every
    other counter measures seconds, and its name ends in ``_s``."""
    return not name.endswith("_s")


def typed(counters: Mapping[str, float]) -> dict[str, float]:
    """``counters`` as their readers expect them: counts as integers (``2``, not ``2.0``),
    seconds as floats, and time saved never below zero. Counters are kept as floats so every
    store can add them."""
    return {
        name: round(v) if is_count(name) else max(0.0, v) if name.endswith("saved_s") else v
        for name, v in counters.items()
    }


FUNCTION_PREFIX = "fn."
LEVEL_PREFIX = "level."


def function_counter(framework: str, name: str, counter: str) -> str:
    """``fn.jax.jit_step.hits``: the counter of one function (names may hold dots)."""
    return f"{FUNCTION_PREFIX}{framework}.{name or '?'}.{counter}"


def level_counter(url: str, counter: str) -> str:
    """``level./root/.cache/compilecache.hits``: the counter of one store level."""
    return f"{LEVEL_PREFIX}{url}.{counter}"


def split_counters(
    counters: Mapping[str, float],
) -> tuple[
    dict[str, float],
    dict[str, dict[str, float]],
    dict[tuple[str, str], dict[str, float]],
    dict[str, dict[str, float]],
]:
    """Split a flat mapping into (totals, per framework, per (framework, function), per level)."""
    totals: dict[str, float] = {}
    frameworks: dict[str, dict[str, float]] = {}
    functions: dict[tuple[str, str], dict[str, float]] = {}
    levels: dict[str, dict[str, float]] = {}
    for name, value in counters.items():
        if name.startswith(FUNCTION_PREFIX):
            framework, dot, rest = name[len(FUNCTION_PREFIX) :].partition(".")
            function, dot2, counter = rest.rpartition(".")
            if dot and dot2:
                functions.setdefault((framework, function), {})[counter] = value
        elif name.startswith(LEVEL_PREFIX):
            url, dot, counter = name[len(LEVEL_PREFIX) :].rpartition(".")
            if dot:
                levels.setdefault(url, {})[counter] = value
        else:
            framework, dot, counter = name.partition(".")
            if dot:
                frameworks.setdefault(framework, {})[counter] = value
            else:
                totals[name] = value
    return totals, frameworks, functions, levels


def merge(*counter_sets: Mapping[str, float]) -> dict[str, float]:
    """Sum several counter mappings."""
    total: dict[str, float] = {}
    for counters in counter_sets:
        for name, value in counters.items():
            total[name] = total.get(name, 0.0) + value
    return total
