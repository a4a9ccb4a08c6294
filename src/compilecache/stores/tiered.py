"""Tiers: several stores, fastest first (sccache's multi-level cache).

``COMPILECACHE_URL=~/.cache/compilecache,redis://cache:6379/0`` gives every host a local disk
level in front of a shared one:

- Reads try each level in order. A hit in a slower level is copied into the faster, writable
  levels before it (backfill), so a host's local disk fills from the shared level and repeated
  starts never touch the network. In a multi-process JAX job only process 0 writes (JAX's own
  gate); the other hosts' local levels fill by backfill.
- Writes go to every writable level (``writes="all"``, the default) or to the first level only
  (``writes="local"``): a host then shares nothing it compiled itself, but still reads and
  backfills from the shared levels. A level opened with ``?readonly=1`` is read and backfilled
  from, never written; ``COMPILECACHE_READ_ONLY=1`` makes every level read-only (no backfill
  either).
- A level that fails is skipped for this call (and, behind its :class:`Guarded` wrapper, for a
  back-off period, during which its reads are plain misses); the other levels still serve. A
  lookup that found nothing re-raises the first level failure so that the cache layer counts it
  (once per outage, not once per lookup); a write succeeds when at least one level took it.
- A cold run of quick compiles stops waiting for the remote level's "nothing here" before each
  compile (:mod:`~compilecache.stores.coldstreak`): the lookup misses at once, and its lease
  claim goes behind the level's write-behind (only a look for the entry, if the compile's
  write comes within two round trips). ``unwaited`` counts those lookups, ``late`` the claims
  that found an entry or another process's lease after all.
- ``level_stats()`` reports hits, misses, errors, skipped calls, writes and backfills per level.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal

from compilecache.config import DEFAULT_COLD_STREAK
from compilecache.errors import ConfigError, CorruptEntry, LevelSkipped, ReadOnlyStore
from compilecache.stats import level_counter
from compilecache.stores.base import (
    HISTORY_LIMIT,
    NO_COORDINATION,
    Claim,
    EntryInfo,
    EntryMeta,
    Pack,
    Store,
)
from compilecache.stores.coldstreak import ColdStreak
from compilecache.stores.fleetledger import FleetLedger
from compilecache.stores.writebehind import WriteBehind

log = logging.getLogger("compilecache")

WritePolicy = Literal["all", "local"]
_COUNTERS = (
    "prefetched",
    "dropped",
    "hits",
    "misses",
    "errors",
    "skipped",
    "writes",
    "write_errors",
    "backfills",
    "saved_s",
    "unwaited",
    "late",
)
# A run's lookups are recorded (for its manifest) up to this many keys.
MAX_LOOKUPS_RECORDED = 20_000
# Prefetch: keys per request, requests at once, and how long a prefetch may go on.
PREFETCH_BATCH = 64
PREFETCH_WORKERS = 4
PREFETCH_DEADLINE = 60.0
# How long a lookup waits for a prefetch list still being read (a remote read, bounded by the
# level's own timeout and back-off; this is only the cap).
PLAN_WAIT_S = 5.0
# A pack (several entries in one object) is read when at least this many entries are missing.
PACK_MIN_KEYS = 4
# A queued claim gives the compile this many round trips to queue its write before taking a
# lease (a quick compile then needs none).
CLAIM_GRACE_RTTS = 2.0
# The token a lookup that did not wait hands out for a claim still queued (resolved later).
_QUEUED = "queued-claim:"

# What a shared level records for the fleet (``stats --url <shared level>``): the level's own
# counters of this process, under the names of the headline counters. Misses are the host's:
# a lookup that missed every level reached every level, and a level's own miss count would also
# hold the re-reads of single-flight waiters polling for an entry.
_FLEET_COUNTERS = {
    "hits": "hits",
    "writes": "writes",
    "saved_s": "compile_time_saved_s",
}


class Tiered(Store):
    """Levels of stores, fastest first. Each capability is answered here, once, for all levels:
    counters and history on the first writable level that keeps them (per host), leases on the
    slowest written level that can coordinate (shared by hosts)."""

    def __init__(
        self,
        levels: Sequence[Store],
        *,
        writes: WritePolicy = "all",
        write_behind: Sequence[bool] | None = None,
        cold_streak: int = DEFAULT_COLD_STREAK,
    ) -> None:
        if not levels:
            raise ConfigError("a tiered store needs at least one level")
        if writes not in ("all", "local"):
            raise ConfigError(f"tier writes must be 'all' or 'local', got {writes!r}")
        self._levels = list(levels)
        self.writes = writes
        self.url = ",".join(level.url for level in self._levels)
        self._writable = [not level.read_only for level in self._levels]
        # For each level, the faster levels a hit there is copied into.
        self._backfill_targets = [
            [d for d in range(depth) if self._writable[d] and (writes == "all" or d == 0)]
            for depth in range(len(self.levels))
        ]
        self._counts = [dict.fromkeys(_COUNTERS, 0.0) for _ in self._levels]
        self._lock = threading.Lock()
        # Remote levels written in the background (the local level never is: it is the one a
        # lookup of this process reads next).
        behind = list(write_behind or [False] * len(self._levels))
        self._behind: list[WriteBehind | None] = [
            WriteBehind(level, on_done=self._write_done(depth))
            if depth and behind[depth] and self._writable[depth]
            else None
            for depth, level in enumerate(self._levels)
        ]
        # Keys looked up, in first-lookup order (the run's manifest), and prefetches under way.
        self._looked_up: dict[str, None] = {}
        self._prefetching: dict[str, threading.Event] = {}
        self._prefetch_deadline = 0.0
        # Cleared by expect_prefetch() until prefetch() has registered what it will fetch.
        self._planned = threading.Event()
        self._planned.set()
        # Lookups that stop waiting on a run of new keys, and their queued claims by token.
        self._streak = ColdStreak(cold_streak)
        self._queued: dict[str, _QueuedClaim] = {}
        self._queued_ids = itertools.count()
        # The shared levels' fleet counters: sent early (after a prefetch) or at exit, once.
        self._fleet = FleetLedger()

    @property
    def levels(self) -> list[Store]:
        return self._levels

    @property
    def read_only(self) -> bool:
        return not any(self._writable)

    def available(self) -> bool:
        return any(level.available() for level in self._levels)

    def _count(self, depth: int, name: str, amount: float = 1.0) -> None:
        with self._lock:
            self._counts[depth][name] += amount

    def _failed(self, depth: int, exc: Exception, what: str) -> None:
        self._count(depth, "skipped" if isinstance(exc, LevelSkipped) else "errors")
        log.debug("compilecache: %s on level %s failed: %s", what, self.levels[depth].url, exc)

    # -- the Store protocol --------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        found, _ = self._get(key, claim_ttl=None)
        return found[0] if found is not None else None

    def get_or_claim(
        self, key: str, ttl_s: float
    ) -> tuple[tuple[bytes, EntryMeta | None] | None, Claim | None]:
        """The lookup through the levels; the lease level, when it is read last, claims the
        lease in the same round trip as its read."""
        return self._get(key, claim_ttl=ttl_s)

    def _get(
        self, key: str, *, claim_ttl: float | None
    ) -> tuple[tuple[bytes, EntryMeta | None] | None, Claim | None]:
        if len(self._looked_up) < MAX_LOOKUPS_RECORDED:
            self._looked_up.setdefault(key)
        if not self._planned.is_set() and not _holds(self.levels[0], key):
            # The manifest is still being read: its prefetch may cover this key.
            self._planned.wait(PLAN_WAIT_S)
        pending = self._prefetching.get(key)
        if pending is not None and not pending.is_set():
            # Being prefetched: wait for it rather than fetch it twice.
            pending.wait(max(0.0, self._prefetch_deadline - time.monotonic()))
        # The claim rides on the read of the lease level when that level is read last.
        claim_level = self._lease_level() if claim_ttl is not None else None
        last = len(self.levels) - 1
        first_error: Exception | None = None
        claim: Claim | None = None
        remote_s = 0.0
        for depth, level in enumerate(self.levels):
            if depth == 1 and claim_ttl is not None and not self._streak.waits():
                queued = self._queue_claim(key, claim_ttl)
                if queued is not None:
                    return None, queued
            start = time.perf_counter()
            try:
                if claim_ttl is not None and level is claim_level and depth == last:
                    found, claim = level.get_or_claim(key, claim_ttl)
                elif depth:
                    # Value and metadata together, in one read where the level can: the meta
                    # labels the backfilled copy and says what this hit saved.
                    found = level.get_with_meta(key)
                else:
                    value = level.get(key)
                    found = (value, None) if value is not None else None
            except Exception as exc:
                self._failed(depth, exc, "get")
                if not isinstance(exc, LevelSkipped):
                    first_error = first_error or exc
                if depth:
                    self._streak.reset()
                continue
            if depth:
                remote_s += time.perf_counter() - start
            if found is None:
                self._count(depth, "misses")
                continue
            if depth:
                self._streak.reset()
            self._served(depth, key, found[0], found[1], time.perf_counter() - start)
            return found, claim
        if first_error is not None:
            raise first_error
        if claim is not None and claim.checked and claim.state in ("won", "unwritten"):
            self._streak.missed(key, remote_s)  # a new key: nothing anywhere, no one on it
        elif claim is not None:
            self._streak.reset()
        return None, claim

    def _queue_claim(self, key: str, ttl_s: float) -> Claim | None:
        """Claim ``key``'s lease behind the lease level's write-behind instead of waiting for
        it, when that level is the one read last; the token handed out stands for the claim
        until it has been made. ``None``: the lookup waits as usual."""
        last = len(self.levels) - 1
        level = self._lease_level()
        behind = self._behind[last]
        if level is not self.levels[last] or behind is None:
            return None
        token = f"{_QUEUED}{next(self._queued_ids)}"
        queued = _QueuedClaim()
        with self._lock:
            self._queued[token] = queued
        self._count(last, "unwaited")

        def found_late() -> None:
            self._count(last, "late")
            self._streak.late()

        def claim(level: Store) -> None:
            won: str | None = None
            try:
                grace = min(CLAIM_GRACE_RTTS * self._streak.rtt, 1.0)
                if behind.wait_for_put(key, grace, if_present=found_late):
                    # The compile is over and its write is next in line: a lease would make no
                    # one wait any more. The write itself, a write of a new entry only, tells
                    # whether another process wrote the key since (found_late).
                    late = False
                else:
                    answer = level.claim_lease(key, ttl_s)
                    late = answer.state in ("present", "held")
                    won = answer.token if answer.state == "won" else None
            except Exception as exc:
                self._failed(last, exc, "claim")
                self._streak.reset()
                late = False
            if late:
                found_late()
            queued.resolve(won)

        behind.call(key, claim)
        return Claim("won", token, checked=True)

    def _served(
        self, depth: int, key: str, value: bytes, meta: EntryMeta | None, elapsed: float
    ) -> None:
        """Count a hit at ``depth`` (and what it saved) and copy it into the faster levels."""
        self._served_many(depth, [(key, value, meta)], elapsed)

    def _served_many(
        self, depth: int, items: Sequence[tuple[str, bytes, EntryMeta | None]], elapsed: float
    ) -> None:
        """Count hits at ``depth`` (each taking ``elapsed``) and copy them into the faster
        levels, all of them in one write per level (a prefetch's backfill)."""
        saved = sum(max(meta.compile_time_s - elapsed, 0.0) for _, _, meta in items if meta)
        with self._lock:
            self._counts[depth]["hits"] += len(items)
            self._counts[depth]["saved_s"] += saved
        for d in self._backfill_targets[depth]:
            try:
                self.levels[d].put_many(items)
            except Exception as exc:
                self._failed(d, exc, "backfill")
                continue
            self._count(d, "backfills", len(items))

    def peek(self, key: str) -> bytes | None:
        """The first level's value, counting, touching and backfilling nothing."""
        first_error: Exception | None = None
        for level in self.levels:
            try:
                value = level.peek(key)
            except CorruptEntry:
                raise  # damage is an answer about this entry, not a level failure
            except Exception as exc:
                log.debug("compilecache: peek on level %s failed: %s", level.url, exc)
                first_error = first_error or exc
                continue
            if value is not None:
                return value
        if first_error is not None:
            raise first_error
        return None

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        if meta is not None:
            self._streak.compiled(key, meta.compile_time_s)
        first_error: Exception | None = None
        wrote = False
        for depth, level in enumerate(self.levels):
            if not self._writable[depth] or (self.writes == "local" and depth):
                continue
            behind = self._behind[depth]
            if behind is not None:
                # Counted as a write (or an error) when the background thread has done it.
                if behind.put(key, value, meta):
                    wrote = True
                else:
                    self._count(depth, "dropped")  # the queue is full: the local copy stands
                continue
            try:
                level.put(key, value, meta)
            except Exception as exc:
                if not isinstance(exc, LevelSkipped):
                    self._count(depth, "write_errors")
                self._failed(depth, exc, "put")
                first_error = first_error or exc
                continue
            self._count(depth, "writes")
            wrote = True
        if not wrote:
            raise first_error or ReadOnlyStore(f"no level of {self.url} is writable")

    def delete(self, key: str) -> bool:
        removed = False
        first_error: Exception | None = None
        tried = False
        for depth, level in enumerate(self.levels):
            if not self._writable[depth]:
                continue
            tried = True
            behind = self._behind[depth]
            if behind is not None:
                behind.cancel(key)  # a queued write must not bring the entry back
            try:
                removed = level.delete(key) or removed
            except Exception as exc:
                self._failed(depth, exc, "delete")
                first_error = first_error or exc
        if not tried:
            raise ReadOnlyStore(f"no level of {self.url} is writable")
        if first_error is not None and not removed:
            raise first_error
        return removed

    def stat(self, key: str) -> EntryInfo | None:
        first_error: Exception | None = None
        for depth, level in enumerate(self.levels):
            try:
                info = level.stat(key)
            except Exception as exc:
                self._failed(depth, exc, "stat")
                first_error = first_error or exc
                continue
            if info is not None:
                return info
        if first_error is not None:
            raise first_error
        return None

    def scans_cheaply(self) -> bool:
        return all(level.scans_cheaply() for level in self.levels)

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Every key of every level once (the fastest level's metadata wins)."""
        seen: dict[str, EntryInfo] = {}
        failures = 0
        for depth, level in enumerate(self.levels):
            try:
                infos = list(level.scan(prefix))
            except Exception as exc:
                failures += 1
                self._failed(depth, exc, "scan")
                log.warning("compilecache: cannot list %s: %s", level.url, exc)
                if failures == len(self.levels):
                    raise
                continue
            for info in infos:
                seen.setdefault(info.key, info)
        return iter(sorted(seen.values(), key=lambda i: i.key))

    # -- stats -----------------------------------------------------------------------------------

    def level_stats(self) -> dict[str, dict[str, float]]:
        """Counters per level, fastest first, keyed by level URL.

        Each holds ``hits``, ``misses``, ``errors``, ``skipped`` (calls not made during a
        back-off; skipped reads are counted as misses too), ``writes``, ``write_errors``,
        ``backfills``, ``writable`` and, for guarded levels, ``down`` (1 while in back-off),
        ``timeouts``, ``outages`` and ``recoveries``.
        """
        out: dict[str, dict[str, float]] = {}
        for depth, (name, level) in enumerate(zip(self._level_names(), self.levels, strict=True)):
            with self._lock:
                counts: dict[str, float] = dict(self._counts[depth])
            counts["writable"] = 1.0 if self._writable[depth] else 0.0
            # A guard sees every skipped call (a skipped read is also a miss here).
            for counter, value in level.health().items():
                if counter in ("skipped", "down", "timeouts", "outages", "recoveries"):
                    counts[counter] = value
            out[name] = counts
        return out

    def _level_names(self) -> list[str]:
        """Each level's name in ``level_stats`` and the ``level.<name>.*`` counters."""
        names: list[str] = []
        for depth, level in enumerate(self.levels):
            names.append(level.url if level.url not in names else f"{level.url}#{depth}")
        return names

    # Persistent counters go to the first writable level that keeps them (normally the local
    # disk): per-host numbers, and no extra network round trip at exit.
    def _stats_level(self) -> Store | None:
        for depth, level in enumerate(self.levels):
            if self._writable[depth] and level.keeps_stats():
                return level
        return None

    def keeps_stats(self) -> bool:
        return self._stats_level() is not None

    def add_stats(self, counters: Mapping[str, float]) -> None:
        """The host's counters go to its stats level; every other level that keeps counters (a
        shared Redis, a shared mount, an object store) adds what it served this host, so that
        ``stats --url <shared level>`` shows the whole fleet (less what :meth:`report_served`
        sent it already)."""
        host_level = self._stats_level()
        for depth, name, level in self._fleet_levels(host_level):
            served = {
                out: counters.get(level_counter(name, counter), 0.0)
                for counter, out in _FLEET_COUNTERS.items()
            }
            served["misses"] = counters.get("misses", 0.0)
            self._send_fleet(level, self._fleet.flush(depth, served))
        if host_level is not None:
            host_level.add_stats(counters)

    def report_served(self) -> None:
        """Send each shared level what it has served this process so far, now instead of at
        exit. Called when a prefetch ends: a warm start's hits are then known, and its exit has
        no round trip left to make for them. Never raises."""
        host_level = self._stats_level()
        for depth, _, level in self._fleet_levels(host_level):
            with self._lock:
                counts = {out: self._counts[depth][c] for c, out in _FLEET_COUNTERS.items()}
            if self._send_fleet(level, self._fleet.early(depth, counts)):
                try:  # the exit's write, if any, is then one round trip again
                    level.prepare_stats()
                except Exception as exc:
                    log.debug("compilecache: %s cannot prepare its counters: %s", level.url, exc)

    def _fleet_levels(self, host_level: Store | None) -> Iterator[tuple[int, str, Store]]:
        """The levels, other than the host's stats level, that keep counters for the fleet."""
        for depth, (name, level) in enumerate(zip(self._level_names(), self.levels, strict=True)):
            if level is not host_level and level.keeps_stats():
                yield depth, name, level

    @staticmethod
    def _send_fleet(level: Store, counters: Mapping[str, float]) -> bool:
        """Add ``counters`` to a shared level; whether anything was sent. Never raises."""
        counters = {k: v for k, v in counters.items() if v}
        if not counters:
            return False
        try:
            level.add_stats(counters)
        except Exception as exc:  # counters are a report: never worth failing for
            log.debug("compilecache: cannot add fleet counters to %s: %s", level.url, exc)
        return True

    def prepare_stats(self) -> None:
        """The shared levels add counters at exit: let them read what they add to now."""
        host_level = self._stats_level()
        for depth, level in enumerate(self.levels):
            if depth and level is not host_level and self._writable[depth]:
                try:
                    level.prepare_stats()
                except Exception as exc:
                    log.debug("compilecache: %s cannot prepare its counters: %s", level.url, exc)

    def read_stats(self) -> dict[str, float]:
        level = self._stats_level()
        return level.read_stats() if level is not None else {}

    def zero_stats(self) -> None:
        level = self._stats_level()
        if level is not None:
            level.zero_stats()

    # History (miss explanations, run totals) lives beside the persistent counters, per host.
    def _history_level(self) -> Store | None:
        for depth, level in enumerate(self.levels):
            if self._writable[depth] and level.keeps_history():
                if not level.available():
                    return None  # in back-off: no history rather than a timeout per miss
                return level
        return None

    def keeps_history(self) -> bool:
        return self._history_level() is not None

    def add_history(self, kind: str, record: Mapping[str, object]) -> None:
        level = self._history_level()
        if level is not None:
            level.add_history(kind, record)

    def read_history(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        level = self._history_level()
        return level.read_history(kind, limit) if level is not None else []

    def clear_history(self) -> None:
        level = self._history_level()
        if level is not None:
            level.clear_history()

    # Leases live on the slowest level that is written and can coordinate (normally the shared
    # one), so that processes on different hosts, each with its own local disk, coordinate.
    def _lease_level(self) -> Store | None:
        for depth in reversed(range(len(self.levels))):
            written = self._writable[depth] and (self.writes == "all" or depth == 0)
            if written and self.levels[depth].supports_leases():
                return self.levels[depth]
        return None

    def supports_leases(self) -> bool:
        return self._lease_level() is not None

    def acquire_lease(self, key: str, ttl_s: float) -> str | None:
        level = self._lease_level()
        return NO_COORDINATION if level is None else level.acquire_lease(key, ttl_s)

    def renew_lease(self, key: str, token: str, ttl_s: float) -> bool:
        level = self._lease_level()
        if level is None:
            return False
        if token.startswith(_QUEUED):
            with self._lock:
                queued = self._queued.get(token)
            if queued is None:
                return False
            if not queued.done.is_set():
                return True  # the claim is still queued; the lease is ours if it wins
            if queued.token is None:
                with self._lock:
                    self._queued.pop(token, None)
                return False  # it did not win: nothing to renew
            token = queued.token
        return level.renew_lease(key, token, ttl_s)

    def claim_lease(self, key: str, ttl_s: float) -> Claim:
        level = self._lease_level()
        return Claim("won", NO_COORDINATION) if level is None else level.claim_lease(key, ttl_s)

    def release_lease(self, key: str, token: str) -> None:
        level = self._lease_level()
        if level is None:
            return
        behind = self._behind[self.levels.index(level)]
        if token.startswith(_QUEUED):
            with self._lock:
                queued = self._queued.pop(token, None)
            if queued is not None and behind is not None:
                # Behind the claim (and the write) it stands for, in the same queue.
                behind.call(key, queued.release(key))
            return
        # Behind a pending write of the key, never before it: a waiter on another host that
        # sees the lease gone then finds the entry.
        if behind is None or not behind.release_lease(key, token):
            level.release_lease(key, token)

    # -- write-behind --------------------------------------------------------------------------

    def _write_done(self, depth: int) -> Callable[[str, BaseException | None], None]:
        def done(key: str, error: BaseException | None) -> None:
            if error is None:
                self._count(depth, "writes")
                return
            if not isinstance(error, LevelSkipped):
                self._count(depth, "write_errors")
            if isinstance(error, Exception):
                self._failed(depth, error, "put")

        return done

    def flush(self, deadline_s: float = 10.0) -> None:
        """Finish the background writes, waiting up to ``deadline_s`` in all."""
        end = time.monotonic() + deadline_s
        for depth, behind in enumerate(self._behind):
            if behind is not None:
                dropped = behind.drain(max(0.0, end - time.monotonic()))
                self._count(depth, "dropped", dropped)

    def close(self) -> None:
        self.flush()
        for level in self.levels:
            try:
                level.close()
            except Exception as exc:
                log.debug("compilecache: closing %s failed: %s", level.url, exc)

    # -- prefetch ------------------------------------------------------------------------------

    def lookups(self) -> list[str]:
        return list(self._looked_up)

    def expect_prefetch(self) -> None:
        """A prefetch list is being read: until :meth:`prefetch` is called, a lookup the first
        level cannot answer waits (at most ``PLAN_WAIT_S``) rather than ask a remote level for
        what the prefetch may be about to fetch."""
        self._planned.clear()

    def prefetch(
        self,
        keys: Sequence[str],
        deadline_s: float = PREFETCH_DEADLINE,
        *,
        pack: Pack | None = None,
    ) -> None:
        """Copy ``keys`` that the first level lacks from the slower levels into it, in the
        background: first from ``pack`` (one object holding several entries) where several are
        missing, then in batches (one round trip each where the level can), a few at a time,
        giving up after ``deadline_s``. A lookup of a key still on its way waits for it. When
        the prefetch ends, the shared levels are sent what they served (:meth:`report_served`)."""
        try:
            fetched = self._start_prefetch(keys, deadline_s, pack)
        finally:
            self._planned.set()
        if fetched:
            self.report_served()

    def _start_prefetch(self, keys: Sequence[str], deadline_s: float, pack: Pack | None) -> bool:
        """Fetch from ``pack`` now, start the batches for the rest; ``True`` when the pack
        fetched everything (the batches report what was served when they end)."""
        targets = [d for d in range(1, len(self.levels)) if self._backfill_targets[d]]
        if not targets or not keys:
            return False
        first = self.levels[0]
        missing = [k for k in dict.fromkeys(keys) if not _holds(first, k)]
        if not missing:
            return False
        self._prefetch_deadline = time.monotonic() + deadline_s
        events = {key: threading.Event() for key in missing}
        self._prefetching.update(events)
        if pack is not None and len(missing) >= PACK_MIN_KEYS:
            # Lookups wait on their events meanwhile (the caller runs on a background thread).
            try:
                missing = self._prefetch_pack(pack, missing, events)
            except Exception as exc:  # never leave a lookup waiting: fetch entry by entry
                log.debug("compilecache: prefetch from a pack failed: %s", exc)
            if not missing:
                return True
        batches = [missing[i : i + PREFETCH_BATCH] for i in range(0, len(missing), PREFETCH_BATCH)]
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(PREFETCH_WORKERS, len(batches)),
            thread_name_prefix="compilecache-prefetch",
        )
        left = [len(batches)]

        def batch_done(_: concurrent.futures.Future[None]) -> None:
            with self._lock:
                left[0] -= 1
                last = not left[0]
            if last:  # the prefetch's hits are all counted: the shared levels can have them
                self.report_served()

        for batch in batches:
            pool.submit(self._prefetch_batch, batch, events).add_done_callback(batch_done)
        pool.shutdown(wait=False)
        # Whatever is not fetched by the deadline is released: its lookup reads as usual.
        timer = threading.Timer(deadline_s, _set_all, args=(list(events.values()),))
        timer.daemon = True
        timer.start()
        return False

    def _prefetch_pack(
        self, pack: Pack, missing: list[str], events: Mapping[str, threading.Event]
    ) -> list[str]:
        """Backfill what ``pack`` holds of ``missing`` from the first slower level that has
        the pack; the keys still missing. Never raises."""
        name, unpack = pack
        for depth in range(1, len(self.levels)):
            if not self._backfill_targets[depth]:
                continue
            start = time.perf_counter()
            try:
                data = self.levels[depth].peek(name)
                if data is None:
                    continue
                found = unpack(data)
            except Exception as exc:  # a damaged or unreadable pack: fetch entry by entry
                self._failed(depth, exc, "pack")
                continue
            elapsed = (time.perf_counter() - start) / max(len(found), 1)
            self._prefetched(
                depth, [(k, *found[k]) for k in missing if k in found], elapsed, events
            )
            return [k for k in missing if k not in found]
        return missing

    def _prefetched(
        self,
        depth: int,
        items: Sequence[tuple[str, bytes, EntryMeta | None]],
        elapsed: float,
        events: Mapping[str, threading.Event],
    ) -> None:
        """Entries a prefetch read from ``depth``: counted, backfilled, then their lookups
        released (they find the local copy)."""
        if not items:
            return
        self._count(depth, "prefetched", len(items))
        self._served_many(depth, items, elapsed)
        for key, _, _ in items:
            events[key].set()

    def _prefetch_batch(self, batch: list[str], events: Mapping[str, threading.Event]) -> None:
        wanted = list(batch)
        try:
            for depth in range(1, len(self.levels)):
                if not wanted or time.monotonic() > self._prefetch_deadline:
                    break
                start = time.perf_counter()
                try:
                    found = self.levels[depth].get_many(wanted)
                except Exception as exc:
                    self._failed(depth, exc, "prefetch")
                    continue
                elapsed = (time.perf_counter() - start) / max(len(found), 1)
                self._prefetched(
                    depth, [(k, *found[k]) for k in wanted if k in found], elapsed, events
                )
                wanted = [k for k in wanted if k not in found]
        except Exception as exc:  # a prefetch must never fail anything: lookups read as usual
            log.debug("compilecache: prefetch failed: %s", exc)
        finally:
            for key in batch:
                events[key].set()


class _QueuedClaim:
    """A lease claim queued behind a level's write-behind: its token once made (``None``: it
    did not win, or failed)."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.done = threading.Event()

    def resolve(self, token: str | None) -> None:
        self.token = token
        self.done.set()

    def release(self, key: str) -> Callable[[Store], None]:
        """The queued release of the lease this claim won (nothing when it did not)."""

        def release(level: Store) -> None:
            if self.token:
                level.release_lease(key, self.token)

        return release


def _holds(level: Store, key: str) -> bool:
    """Whether ``level`` holds ``key`` (by its metadata; a failing level holds nothing)."""
    try:
        return level.stat(key) is not None
    except Exception:
        return False


def _set_all(events: Sequence[threading.Event]) -> None:
    for event in events:
        event.set()
