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
  compile (:mod:`~compilecache.stores.tiers.coldstreak`): the lookup misses at once, and its lease
  claim goes behind the level's write-behind (only a look for the entry, if the compile's
  write comes within two round trips). ``unwaited`` counts those lookups, ``late`` the claims
  that found an entry or another process's lease after all.
- ``level_stats()`` reports hits, misses, errors, skipped calls, writes and backfills per level.
  Hits, misses, writes, prefetches and backfills are of compiles, as the cache counts them: a
  record about a compile (a JAX trace, :data:`~compilecache.entry.RECORD_PREFIXES`) is read,
  written and backfilled without being counted among them.

Each capability is placed once, when the tiers are built: counters and history on the host's
level, leases on the slowest written level that coordinates (:class:`TierCounters`,
:class:`_TierLeases`). Prefetching from a job's manifest, and the record of what a run looked
up, live beside the manifest (:mod:`compilecache.runtime.prefetch`): the tiers only serve and
backfill what it fetches (:meth:`Tiered.fetched`). A remote level alone has no faster level to
prefetch into: what a framework is about to look up is read in one batch and held in memory for
its lookups (:meth:`Tiered.hold`, :mod:`~compilecache.stores.tiers.held`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

from compilecache.entry import is_record
from compilecache.errors import ConfigError, CorruptEntry, LevelSkipped, ReadOnlyStore
from compilecache.stores.base import EntryInfo, EntryMeta, Store, get_or_claim
from compilecache.stores.capabilities import Claim, Found, History, Leases
from compilecache.stores.tiers.coldstreak import ColdStreak
from compilecache.stores.tiers.counters import TierCounters
from compilecache.stores.tiers.held import Held
from compilecache.stores.tiers.writebehind import WriteBehind
from compilecache.units import DEFAULT_COLD_STREAK

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
# A queued claim gives the compile this many round trips to queue its write before taking a
# lease (a quick compile then needs none).
CLAIM_GRACE_RTTS = 2.0
# The token a lookup that did not wait hands out for a claim still queued (resolved later).
_QUEUED = "queued-claim:"


class Tiered(Store):
    """Levels of stores, fastest first. Each capability is placed here once, when the tiers are
    built: counters and history on the host's level (:class:`TierCounters`), leases on the
    slowest written level that can coordinate (shared by hosts)."""

    def __init__(
        self,
        levels: Sequence[Store],
        *,
        writes: WritePolicy = "all",
        write_behind: Sequence[bool] | None = None,
        cold_streak: int = DEFAULT_COLD_STREAK,
        remote: Sequence[bool] | None = None,
    ) -> None:
        if not levels:
            raise ConfigError("a tiered store needs at least one level")
        if writes not in ("all", "local"):
            raise ConfigError(f"tier writes must be 'all' or 'local', got {writes!r}")
        self.levels = list(levels)
        self.writes = writes
        self.url = ",".join(level.url for level in self.levels)
        self._writable = [not level.read_only for level in self.levels]
        self.read_only = not any(self._writable)
        self.scans_cheaply = all(level.scans_cheaply for level in self.levels)
        # Each level's name in level_stats and the ``level.<name>.*`` counters.
        self.names: list[str] = []
        for depth, level in enumerate(self.levels):
            self.names.append(level.url if level.url not in self.names else f"{level.url}#{depth}")
        # For each level, the faster levels a hit there is copied into.
        self._backfill_targets = [
            [d for d in range(depth) if self._writable[d] and (writes == "all" or d == 0)]
            for depth in range(len(self.levels))
        ]
        self._counts = [dict.fromkeys(_COUNTERS, 0.0) for _ in self.levels]
        self._lock = threading.Lock()
        # Remote levels written in the background (the local level never is: it is the one a
        # lookup of this process reads next).
        behind = list(write_behind or [False] * len(self.levels))
        self._behind: list[WriteBehind | None] = [
            WriteBehind(level, on_done=self._write_done(depth))
            if depth and behind[depth] and self._writable[depth]
            else None
            for depth, level in enumerate(self.levels)
        ]
        # Lookups that stop waiting on a run of new keys, and their queued claims by token.
        self._streak = ColdStreak(cold_streak)
        # Entries read ahead in one batch where the only level is remote (:meth:`hold`).
        self.holds = len(self.levels) == 1 and bool(remote and remote[0])
        self._held = Held()
        self._queued: dict[str, _QueuedClaim] = {}
        self._queued_ids = itertools.count()
        self._tier_counters: TierCounters | None = None
        if any(level.counters is not None for level in self.levels):
            self._tier_counters = TierCounters(
                self.levels, self.names, self._writable, self.served_counts
            )
        self.counters = self._tier_counters
        self.history = self._history()
        self.lease_depth = self._lease_depth()
        self.leases = _TierLeases(self, self.lease_depth) if self.lease_depth is not None else None

    @classmethod
    def of(cls, store: Store) -> Tiered:
        """``store`` as tiers: itself when it is tiers already, else tiers of that one level."""
        return store if isinstance(store, Tiered) else cls([store])

    # History (miss explanations, run totals) lives beside the host's counters: the first
    # writable level that keeps it, else the first that keeps it (it is not an entry).
    def _history(self) -> History | None:
        keeping = [d for d, level in enumerate(self.levels) if level.history is not None]
        depth = next((d for d in keeping if self._writable[d]), keeping[0] if keeping else None)
        return self.levels[depth].history if depth is not None else None

    # Leases live on the slowest level that is written and can coordinate (normally the shared
    # one), so that processes on different hosts, each with its own local disk, coordinate.
    def _lease_depth(self) -> int | None:
        for depth in reversed(range(len(self.levels))):
            written = self._writable[depth] and (self.writes == "all" or depth == 0)
            if written and self.levels[depth].leases is not None:
                return depth
        return None

    def _count(self, depth: int, name: str, amount: float = 1.0) -> None:
        with self._lock:
            self._counts[depth][name] += amount

    def failed(self, depth: int, exc: Exception, what: str) -> None:
        """Count a failure of the level at ``depth`` (a skipped call during its back-off apart)."""
        self._count(depth, "skipped" if isinstance(exc, LevelSkipped) else "errors")
        log.debug("compilecache: %s on level %s failed: %s", what, self.levels[depth].url, exc)

    # -- the Store protocol --------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        found, _ = self._get(key, claim_ttl=None)
        return found[0] if found is not None else None

    def _get(self, key: str, *, claim_ttl: float | None) -> tuple[Found | None, Claim | None]:
        """The lookup through the levels. With ``claim_ttl``, the lease level, when it is read
        last, claims the lease in the same round trip as its read."""
        held = self._held.take(key)
        if held is not None:  # read ahead with others: counted now, as the read it stands for
            if not is_record(key):
                self._count(0, "prefetched")
            self._served(0, key, held[0], held[1], held[2])
            return (held[0], held[1]), None
        # The claim rides on the read of the lease level when that level is read last.
        claim_depth = self.lease_depth if claim_ttl is not None else None
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
                if claim_ttl is not None and depth == claim_depth == last:
                    found, claim = get_or_claim(level, key, claim_ttl)
                elif depth:
                    # Value and metadata together, in one read where the level can: the meta
                    # labels the backfilled copy and says what this hit saved.
                    found = level.get_with_meta(key)
                else:
                    value = level.get(key)
                    found = (value, None) if value is not None else None
            except Exception as exc:
                self.failed(depth, exc, "get")
                if not isinstance(exc, LevelSkipped):
                    first_error = first_error or exc
                if depth:
                    self._streak.reset()
                continue
            if depth:
                remote_s += time.perf_counter() - start
            if found is None:
                if not is_record(key):  # a record about a compile is no lookup of one
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
        behind = self._behind[last]
        if self.lease_depth != last or behind is None:
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
                    answer = _leases(level).claim(key, ttl_s)
                    late = answer.state in ("present", "held")
                    won = answer.token if answer.state == "won" else None
            except Exception as exc:
                self.failed(last, exc, "claim")
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
        levels, all of them in one write per level (a prefetch's backfill). Records about
        compiles (:func:`~compilecache.entry.is_record`) are copied, neither counted as hits nor
        as backfills."""
        compiles = [meta for key, _, meta in items if not is_record(key)]
        saved = sum(max(meta.compile_time_s - elapsed, 0.0) for meta in compiles if meta)
        with self._lock:
            self._counts[depth]["hits"] += len(compiles)
            self._counts[depth]["saved_s"] += saved
        for d in self._backfill_targets[depth]:
            try:
                self.levels[d].put_many(items)
            except Exception as exc:
                self.failed(d, exc, "backfill")
                continue
            self._count(d, "backfills", len(compiles))

    # -- what a prefetch (compilecache.runtime.prefetch) asks of the tiers ---------------------

    def fills(self, depth: int) -> bool:
        """Whether a hit at ``depth`` is copied into a faster level (what a prefetch is for)."""
        return bool(self._backfill_targets[depth])

    def fetched(
        self, depth: int, items: Sequence[tuple[str, bytes, EntryMeta | None]], elapsed: float
    ) -> None:
        """Entries a prefetch read from ``depth`` (each taking ``elapsed``): counted as
        prefetched and as hits there (records about compiles neither), and copied into the
        faster levels."""
        if items:
            self._count(depth, "prefetched", sum(1 for key, _, _ in items if not is_record(key)))
            self._served_many(depth, items, elapsed)

    def hold(self, keys: Sequence[str]) -> int:
        """Read ``keys`` in one batch ahead of their lookups and hold them in memory, where the
        only level is remote (:attr:`holds`; tiers with a faster level prefetch into it
        instead): each held entry is served once to its lookup and counted then
        (:mod:`~compilecache.stores.tiers.held`), as a hit and as prefetched. How many are
        held. Never raises."""
        if not self.holds:
            return 0
        wanted = [k for k in dict.fromkeys(keys) if k not in self._held]
        if not wanted:
            return 0
        start = time.perf_counter()
        try:
            found = self.levels[0].get_many(wanted)
        except Exception as exc:  # the lookups read one by one, as without it
            self.failed(0, exc, "read ahead")
            return 0
        return self._held.add(found, (time.perf_counter() - start) / max(len(found), 1))

    def report_served(self) -> None:
        """Send the shared levels what they served this process so far (after a prefetch)."""
        if self._tier_counters is not None:
            self._tier_counters.report_served()

    def peek(self, key: str) -> bytes | None:
        """The first level's value, counting, touching and backfilling nothing."""
        return self.head(key, -1)

    def head(self, key: str, size: int) -> bytes | None:
        """The first ``size`` bytes of the first level's value (all of it for ``-1``), counting,
        touching and backfilling nothing."""
        first_error: Exception | None = None
        for level in self.levels:
            try:
                value = level.peek(key) if size < 0 else level.head(key, size)
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
        self._held.drop(key)
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
                self.failed(depth, exc, "put")
                first_error = first_error or exc
                continue
            if not is_record(key):  # a record about a compile is no compile's write
                self._count(depth, "writes")
            wrote = True
        if not wrote:
            raise first_error or ReadOnlyStore(f"no level of {self.url} is writable")

    def delete(self, key: str) -> bool:
        self._held.drop(key)
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
                self.failed(depth, exc, "delete")
                first_error = first_error or exc
        if not tried:
            raise ReadOnlyStore(f"no level of {self.url} is writable")
        if first_error is not None and not removed:
            raise first_error
        return removed

    def stat(self, key: str) -> EntryInfo | None:
        held = self._held.info(key)
        if held is not None:
            return held
        first_error: Exception | None = None
        for depth, level in enumerate(self.levels):
            try:
                info = level.stat(key)
            except Exception as exc:
                self.failed(depth, exc, "stat")
                first_error = first_error or exc
                continue
            if info is not None:
                return info
        if first_error is not None:
            raise first_error
        return None

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Every key of every level once (the fastest level's metadata wins)."""
        seen: dict[str, EntryInfo] = {}
        failures = 0
        for depth, level in enumerate(self.levels):
            try:
                infos = list(level.scan(prefix))
            except Exception as exc:
                failures += 1
                self.failed(depth, exc, "scan")
                if failures == len(self.levels):
                    raise
                if not getattr(exc, "reported", False):  # its guard said it already, once
                    log.warning("compilecache: cannot list %s: %s", level.url, exc)
                continue
            for info in infos:
                seen.setdefault(info.key, info)
        return iter(sorted(seen.values(), key=lambda i: i.key))

    # -- stats ------------------------------------------------------------------------------------

    def level_stats(self) -> dict[str, dict[str, float]]:
        """Counters per level, fastest first, keyed by level name (its URL).

        Each holds ``hits``, ``misses``, ``errors``, ``skipped`` (calls not made during a
        back-off; skipped reads are counted as misses too), ``writes``, ``write_errors``,
        ``backfills``, ``writable`` and, for guarded levels, ``down`` (1 while in back-off),
        ``timeouts``, ``outages`` and ``recoveries``.
        """
        out: dict[str, dict[str, float]] = {}
        for depth, (name, level) in enumerate(zip(self.names, self.levels, strict=True)):
            counts = self.served_counts(depth)
            counts["writable"] = 1.0 if self._writable[depth] else 0.0
            # A guard sees every skipped call (a skipped read is also a miss here).
            health = level.health.stats() if level.health is not None else {}
            for counter, value in health.items():
                if counter in ("skipped", "down", "timeouts", "outages", "recoveries"):
                    counts[counter] = value
            out[name] = counts
        return out

    def served_counts(self, depth: int) -> dict[str, float]:
        """The counters of the level at ``depth`` in this process (hits, writes, saved_s...)."""
        with self._lock:
            return dict(self._counts[depth])

    def _queued_claim(self, token: str) -> _QueuedClaim | None:
        with self._lock:
            return self._queued.get(token)

    def _forget_claim(self, token: str) -> _QueuedClaim | None:
        with self._lock:
            return self._queued.pop(token, None)

    # -- write-behind --------------------------------------------------------------------------

    def _write_done(self, depth: int) -> Callable[[str, BaseException | None], None]:
        def done(key: str, error: BaseException | None) -> None:
            if error is None:
                if not is_record(key):
                    self._count(depth, "writes")
                return
            if not isinstance(error, LevelSkipped):
                self._count(depth, "write_errors")
            if isinstance(error, Exception):
                self.failed(depth, error, "put")

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
                _leases(level).release(key, self.token)

        return release


class _TierLeases(Leases):
    """The leases of the tiers: those of the level at ``depth`` (the slowest written level that
    coordinates), with the claims a lookup queued behind that level's write-behind
    (:meth:`Tiered._queue_claim`) standing in for their lease until they are made."""

    def __init__(self, tiers: Tiered, depth: int) -> None:
        self._tiers = tiers
        self._depth = depth
        self._level = tiers.levels[depth]
        self._leases = _leases(self._level)

    def acquire(self, key: str, ttl_s: float) -> str | None:
        return self._leases.acquire(key, ttl_s)

    def claim(self, key: str, ttl_s: float) -> Claim:
        return self._leases.claim(key, ttl_s)

    def get_or_claim(self, key: str, ttl_s: float) -> tuple[Found | None, Claim | None]:
        """The lookup through the levels; the lease level, when it is read last, claims the
        lease in the same round trip as its read."""
        return self._tiers._get(key, claim_ttl=ttl_s)

    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        if token.startswith(_QUEUED):
            queued = self._tiers._queued_claim(token)
            if queued is None:
                return False
            if not queued.done.is_set():
                return True  # the claim is still queued; the lease is ours if it wins
            if queued.token is None:
                self._tiers._forget_claim(token)
                return False  # it did not win: nothing to renew
            token = queued.token
        return self._leases.renew(key, token, ttl_s)

    def release(self, key: str, token: str) -> None:
        behind = self._tiers._behind[self._depth]
        if token.startswith(_QUEUED):
            queued = self._tiers._forget_claim(token)
            if queued is not None and behind is not None:
                # Behind the claim (and the write) it stands for, in the same queue.
                behind.call(key, queued.release(key))
            return
        # Behind a pending write of the key, never before it: a waiter on another host that
        # sees the lease gone then finds the entry.
        if behind is None or not behind.release_lease(key, token):
            self._leases.release(key, token)


def _leases(level: Store) -> Leases:
    """The leases of a level the tiers chose for them (never ``None`` there)."""
    leases = level.leases
    if leases is None:  # the tiers choose only a level that has leases
        raise ConfigError(f"{level.url} has no leases")
    return leases
