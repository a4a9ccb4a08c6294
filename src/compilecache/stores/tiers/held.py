"""Entries read ahead of their lookups in one batch, held in memory until they are looked up.

A store of one remote level (one Redis, one bucket) has no faster level to copy a prefetch into,
so each lookup is a round trip of its own. Where a framework knows what it is about to look up
(a Dynamo package's graphs and kernels, read once the package is served), the tiers read those
entries in one batch and hold them here: each is handed once to its lookup, which the tiers then
count as the read it stands for (a hit at that level, as if it had read it). Nothing is counted
for an entry that is never looked up.

Held entries are whole stored entries, verified when their lookup decodes them, like any read:
holding one changes when it is read, never what is served. What is not looked up within
``HOLD_S`` is dropped, a write or delete of a key drops its held copy, and the entries held at
once are bounded by ``HOLD_MAX_BYTES`` (the rest of a batch is read at its lookup, as before).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from compilecache.stores.base import EntryInfo
from compilecache.stores.capabilities import EntryMeta, Found

# How long a held entry waits for its lookup, and how many bytes are held at once.
HOLD_S = 120.0
HOLD_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class _Entry:
    value: bytes
    meta: EntryMeta | None
    elapsed: float  # this entry's share of the batch's read
    read_at: float  # time.time() of the read (what stat reports)
    until: float  # time.monotonic() after which it is dropped


class Held:
    """Entries read ahead of their lookups, each handed out once (thread-safe)."""

    def __init__(self, hold_s: float = HOLD_S, max_bytes: int = HOLD_MAX_BYTES) -> None:
        self.hold_s = hold_s
        self.max_bytes = max_bytes
        self._entries: dict[str, _Entry] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            self._expire()
            return key in self._entries

    def add(self, found: Mapping[str, Found], elapsed: float) -> int:
        """Hold ``found`` (each read in ``elapsed`` seconds) while room is left; how many."""
        now, wall = time.monotonic(), time.time()
        kept = 0
        with self._lock:
            self._expire()
            for key, (value, meta) in found.items():
                if key in self._entries or self._bytes + len(value) > self.max_bytes:
                    continue
                self._entries[key] = _Entry(value, meta, elapsed, wall, now + self.hold_s)
                self._bytes += len(value)
                kept += 1
        return kept

    def take(self, key: str) -> tuple[bytes, EntryMeta | None, float] | None:
        """The held entry of ``key`` with its share of the read's time, handed out once."""
        with self._lock:
            self._expire()
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._bytes -= len(entry.value)
        return entry.value, entry.meta, entry.elapsed

    def info(self, key: str) -> EntryInfo | None:
        """What ``stat`` would say of the held entry of ``key`` (left held)."""
        with self._lock:
            self._expire()
            entry = self._entries.get(key)
        if entry is None:
            return None
        meta = entry.meta or EntryMeta()
        return EntryInfo(key, len(entry.value), entry.read_at, entry.read_at, meta=meta)

    def drop(self, key: str) -> None:
        """Forget ``key``'s held copy (it is being written or deleted)."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._bytes -= len(entry.value)

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, e in self._entries.items() if e.until < now]:
            self._bytes -= len(self._entries.pop(key).value)
