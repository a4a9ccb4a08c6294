"""The counters of tiers: the host's, and what the shared levels have been sent for the fleet.

A shared level (Redis, a shared mount, an object store) counts what it served every host
(``stats --url <shared level>``). The counts are sent at exit, with the host's own counters: a
round trip to the remote level (50 ms at 25 ms per direction) that every process pays as it
ends. A warm start from a remote level knows most of its counts long before that: the entries
it prefetched are its hits. :class:`FleetLedger` lets the tiers send those early, in the
background, and keeps the exit from sending them twice.

Per level and counter it keeps two running totals:

- ``told``: what the exit's flushes asked to send (``TierCounters.add``, each flush a delta of
  this process's counters, so the total is the count as of the last flush);
- ``sent``: what was actually sent, early or at a flush.

A flush sends ``told - sent`` (nothing when an early report covered it); an early report sends
``count now - sent``. Since ``told`` never runs ahead of the count, the level receives each
count once, whichever comes first.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from compilecache.stats import level_counter
from compilecache.stores.base import Store
from compilecache.stores.capabilities import Counters

log = logging.getLogger("compilecache")

# What a shared level records for the fleet (``stats --url <shared level>``): the level's own
# counters of this process, under the names of the headline counters. Misses are the host's:
# a lookup that missed every level reached every level, and a level's own miss count would also
# hold the re-reads of single-flight waiters polling for an entry.
FLEET_COUNTERS = {
    "hits": "hits",
    "writes": "writes",
    "saved_s": "compile_time_saved_s",
}


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


class TierCounters(Counters):
    """The counters of tiers (:class:`~compilecache.stores.tiers.Tiered`), placed once, when the
    tiers are built.

    The host's own counters go to the *host level*: the first writable level that keeps counters
    (normally the local disk: per-host numbers, and no extra round trip at exit), or, where no
    level is writable, the first that keeps them (counters are not entries: a read-only client
    still records what it hit). Every other level that keeps counters (a shared Redis, a shared
    mount, an object store) adds what it served this host, so that ``stats --url <shared level>``
    shows the whole fleet; :meth:`report_served` sends that early, after a prefetch.
    """

    def __init__(
        self,
        levels: Sequence[Store],
        names: Sequence[str],
        writable: Sequence[bool],
        served: Callable[[int], Mapping[str, float]],
    ) -> None:
        """``names``: each level's name in the ``level.<name>.*`` counters; ``served(depth)``:
        the level's own counters in this process (hits, writes, saved_s, ...)."""
        keeping = [(d, c) for d, level in enumerate(levels) if (c := level.counters) is not None]
        host = next((d for d, _ in keeping if writable[d]), keeping[0][0] if keeping else None)
        self._host = levels[host].counters if host is not None else None
        # (depth, name, counters, writable) of the other levels that keep counters.
        self._fleet = [(d, names[d], c, writable[d]) for d, c in keeping if d != host]
        self._urls = [level.url for level in levels]
        self._served = served
        self._ledger = FleetLedger()

    def add(self, counters: Mapping[str, float]) -> None:
        """The host's counters to the host level; to each shared level, what it served this host
        (less what :meth:`report_served` sent it already)."""
        for depth, name, level, _ in self._fleet:
            served = {
                out: counters.get(level_counter(name, counter), 0.0)
                for counter, out in FLEET_COUNTERS.items()
            }
            served["misses"] = counters.get("misses", 0.0)
            self._send(depth, level, self._ledger.flush(depth, served))
        if self._host is not None:
            self._host.add(counters)

    def read(self) -> dict[str, float]:
        return self._host.read() if self._host is not None else {}

    def zero(self) -> None:
        if self._host is not None:
            self._host.zero()

    def prepare(self) -> None:
        """The shared levels add counters at exit: let them read what they add to now."""
        for depth, _, level, writable in self._fleet:
            if depth and writable:
                self._prepare(depth, level)

    def report_served(self) -> None:
        """Send each shared level what it has served this process so far, now instead of at
        exit. Called when a prefetch ends: a warm start's hits are then known, and its exit has
        no round trip left to make for them. Never raises."""
        for depth, _, level, _ in self._fleet:
            served = self._served(depth)
            counts = {out: served.get(c, 0.0) for c, out in FLEET_COUNTERS.items()}
            if self._send(depth, level, self._ledger.early(depth, counts)):
                self._prepare(depth, level)  # the exit's write, if any, is one round trip again

    def _prepare(self, depth: int, level: Counters) -> None:
        try:
            level.prepare()
        except Exception as exc:
            log.debug("compilecache: %s cannot prepare its counters: %s", self._urls[depth], exc)

    def _send(self, depth: int, level: Counters, counters: Mapping[str, float]) -> bool:
        """Add ``counters`` to a shared level; whether anything was sent. Never raises."""
        counters = {k: v for k, v in counters.items() if v}
        if not counters:
            return False
        try:
            level.add(counters)
        except Exception as exc:  # counters are a report: never worth failing for
            log.debug("compilecache: cannot add fleet counters to %s: %s", self._urls[depth], exc)
        return True
