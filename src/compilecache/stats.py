"""Counters: per process, per framework, and their persistent merge into a store.

Counters are a flat ``{name: float}`` mapping so that every store can keep them (SQLite rows,
Redis hash fields): the totals are ``hits``, ``misses``, ... and each framework has its own copy
under ``jax.hits``, ``torch.misses`` and so on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

COUNTERS = (
    "hits",
    "misses",
    "writes",
    "errors",
    "corrupt",
    "skipped",
    "bytes_read",
    "bytes_written",
    "compile_time_s",
    "compile_time_saved_s",
    "load_time_s",
)


class Stats:
    """Thread-safe counters of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}

    def add(self, name: str, value: float = 1.0, framework: str = "") -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0.0) + value
            if framework:
                scoped = f"{framework}.{name}"
                self._values[scoped] = self._values.get(scoped, 0.0) + value

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


@dataclass(frozen=True)
class Summary:
    """The headline numbers people read."""

    hits: int
    misses: int
    writes: int
    errors: int
    compile_time_saved_s: float

    @classmethod
    def of(cls, counters: Mapping[str, float]) -> Summary:
        return cls(
            hits=int(counters.get("hits", 0)),
            misses=int(counters.get("misses", 0)),
            writes=int(counters.get("writes", 0)),
            errors=int(counters.get("errors", 0)),
            compile_time_saved_s=float(counters.get("compile_time_saved_s", 0.0)),
        )

    def line(self) -> str:
        return (
            f"compilecache: {self.hits} hits, {self.misses} misses, {self.writes} writes, "
            f"{self.errors} errors, {self.compile_time_saved_s:.1f}s compile time saved"
        )


def merge(*counter_sets: Mapping[str, float]) -> dict[str, float]:
    """Sum several counter mappings."""
    total: dict[str, float] = {}
    for counters in counter_sets:
        for name, value in counters.items():
            total[name] = total.get(name, 0.0) + value
    return total
