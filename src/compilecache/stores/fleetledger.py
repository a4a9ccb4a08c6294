"""What the shared levels of the tiers have been sent of their fleet counters, and what is left.

A shared level (Redis, a shared mount, an object store) counts what it served every host
(``stats --url <shared level>``). The counts are sent at exit, with the host's own counters: a
round trip to the remote level (50 ms at 25 ms per direction) that every process pays as it
ends. A warm start from a remote level knows most of its counts long before that: the entries
it prefetched are its hits. :class:`FleetLedger` lets the tiers send those early, in the
background, and keeps the exit from sending them twice.

Per level and counter it keeps two running totals:

- ``told``: what the exit's flushes asked to send (``Tiered.add_stats``, each flush a delta of
  this process's counters, so the total is the count as of the last flush);
- ``sent``: what was actually sent, early or at a flush.

A flush sends ``told - sent`` (nothing when an early report covered it); an early report sends
``count now - sent``. Since ``told`` never runs ahead of the count, the level receives each
count once, whichever comes first.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping


class FleetLedger:
    """Running totals of the fleet counters told and sent, per level (by depth)."""

    def __init__(self) -> None:
        self._told: dict[int, dict[str, float]] = {}
        self._sent: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()

    def flush(self, depth: int, told: Mapping[str, float]) -> dict[str, float]:
        """What a flush that asks the level at ``depth`` to add ``told`` should send now."""
        with self._lock:
            told_total = self._told.setdefault(depth, {})
            sent = self._sent.setdefault(depth, {})
            out: dict[str, float] = {}
            for name, amount in told.items():
                told_total[name] = told_total.get(name, 0.0) + amount
                send = told_total[name] - sent.get(name, 0.0)
                if send > 0:
                    out[name] = send
                    sent[name] = told_total[name]
            return out

    def early(self, depth: int, counts: Mapping[str, float]) -> dict[str, float]:
        """What an early report to the level at ``depth``, whose counts so far are ``counts``,
        should send now (recorded as sent: a failed send is a report lost, never resent)."""
        with self._lock:
            sent = self._sent.setdefault(depth, {})
            out: dict[str, float] = {}
            for name, count in counts.items():
                send = count - sent.get(name, 0.0)
                if send > 0:
                    out[name] = send
                    sent[name] = count
            return out
