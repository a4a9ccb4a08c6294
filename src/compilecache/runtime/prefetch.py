"""Prefetching a job's entries into this host's level, and the record of what a run looked up.

A session with a remote level reads the job's manifest (:mod:`compilecache.runtime.manifest`) in
the background and hands its keys to a :class:`Prefetcher`, which copies those the first level
lacks from the slower levels (a pack of entries in one object first, then batches of one round
trip each, a few at a time). The cache (:class:`~compilecache.runtime.cache.Cache`) tells the
prefetcher of each lookup before it reads (:meth:`Prefetcher.before_read`): the key is recorded
for the next manifest, and a lookup of a key on its way waits for it rather than fetch it twice.
The tiers (:class:`~compilecache.stores.tiers.Tiered`) count and backfill what it fetched.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from compilecache.stores.base import EntryMeta, Pack, Store
from compilecache.stores.tiers import Tiered

log = logging.getLogger("compilecache")

# A run's lookups are recorded (for its manifest) up to this many keys.
MAX_LOOKUPS_RECORDED = 20_000
# Keys per request, requests at once, and how long a prefetch may go on.
PREFETCH_BATCH = 64
PREFETCH_WORKERS = 4
PREFETCH_DEADLINE = 60.0
# How long a lookup waits for a prefetch list still being read (a remote read, bounded by the
# level's own timeout and back-off; this is only the cap).
PLAN_WAIT_S = 5.0
# A pack (several entries in one object) is read when at least this many entries are missing.
PACK_MIN_KEYS = 4


class Prefetcher:
    """The prefetch of one session's tiers, and the keys its lookups asked for."""

    def __init__(self, tiers: Tiered) -> None:
        self.tiers = tiers
        # Keys looked up, in first-lookup order (the run's manifest), and prefetches under way.
        self._looked_up: dict[str, None] = {}
        self._prefetching: dict[str, threading.Event] = {}
        self._deadline = 0.0
        self._lock = threading.Lock()
        # Cleared by expect() until start() has registered what it will fetch.
        self._planned = threading.Event()
        self._planned.set()
        # The keys the job's last runs looked up (its manifest), once read: what a framework
        # may prepare ahead of its lookups (the JAX integration deserialises them).
        self._job_keys: list[str] = []
        self._job_keys_read = threading.Event()
        # Whether a framework asked for them (a store of one level keeps a manifest only then),
        # and what reads them when one asks first (a store of one level reads nothing at start).
        self.job_keys_asked = False
        self._read_job_keys: Callable[[], Sequence[str]] | None = None

    def lookups(self) -> list[str]:
        """The keys this process looked up, in first-lookup order."""
        return list(self._looked_up)

    def mark(self) -> int:
        """Where the record of lookups stands now: :meth:`lookups_since` lists those after it."""
        return len(self._looked_up)

    def lookups_since(self, mark: int) -> list[str]:
        """The keys first looked up after ``mark`` (a :meth:`mark`), in order."""
        return list(self._looked_up)[mark:]  # list() first: other threads add keys meanwhile

    def read_together(self, keys: Sequence[str]) -> None:
        """``keys`` are about to be looked up (a Dynamo package's graphs and kernels, once the
        package is served): fetch them at once rather than one round trip per lookup. Tiers
        with a faster level get them copied into it in the background (:meth:`start`; their
        lookups wait for them); a remote level alone reads them in one batch and holds them for
        their lookups (:meth:`Tiered.hold`). Never raises."""
        try:
            if self.tiers.holds:
                self.tiers.hold(keys)
                return
            # list() first: a prefetch under way adds keys meanwhile.
            coming = {k for k, event in list(self._prefetching.items()) if not event.is_set()}
            # Not start(): that would end the wait of lookups for a manifest still being read.
            self._start([k for k in keys if k not in coming], PREFETCH_DEADLINE, None)
        except Exception as exc:  # the lookups read one by one, as without it
            log.debug("compilecache: read-together failed: %s", exc)

    def set_job_keys(self, keys: Sequence[str]) -> None:
        """The job's manifest has been read: ``keys``, in the order its last runs asked."""
        self._job_keys = list(keys)
        self._job_keys_read.set()

    def read_job_keys_with(self, read: Callable[[], Sequence[str]]) -> None:
        """The job's manifest is read by ``read``, on the thread of the first :meth:`job_keys`."""
        self._read_job_keys = read

    def job_keys(self, timeout: float) -> list[str]:
        """The keys of the job's manifest, waiting up to ``timeout`` seconds for it to be read
        (``[]`` when it is not read by then, or there is none)."""
        with self._lock:
            read, self._read_job_keys = self._read_job_keys, None
            self.job_keys_asked = True
        if read is not None:
            found: Sequence[str] = []
            try:
                found = read()
            except Exception as exc:  # no list: nothing is prepared ahead
                log.debug("compilecache: the job's manifest not read: %s", exc)
            finally:
                self.set_job_keys(found)
        self._job_keys_read.wait(timeout)
        return list(self._job_keys)

    def before_read(self, key: str) -> None:
        """A lookup of ``key`` is about to read the tiers: record it, and wait while the key is
        on its way (or the list of keys to fetch still is)."""
        self.record(key)
        self.wait_for(key)

    def record(self, key: str) -> None:
        """``key`` was looked up: listed for the job's next manifest."""
        if len(self._looked_up) < MAX_LOOKUPS_RECORDED:
            self._looked_up.setdefault(key)

    def wait_for(self, key: str) -> None:
        """Wait while ``key`` is on its way to the first level (or the list of keys to fetch
        still is); a read that is not a lookup (a read ahead) waits without being recorded."""
        if not self._planned.is_set() and not _holds(self.tiers.levels[0], key):
            # The manifest is still being read: its prefetch may cover this key.
            self._planned.wait(PLAN_WAIT_S)
        pending = self._prefetching.get(key)
        if pending is not None and not pending.is_set():
            # Being prefetched: wait for it rather than fetch it twice.
            pending.wait(max(0.0, self._deadline - time.monotonic()))

    def expect(self) -> None:
        """A prefetch list is being read: until :meth:`start` is called, a lookup the first
        level cannot answer waits (at most ``PLAN_WAIT_S``) rather than ask a remote level for
        what the prefetch may be about to fetch."""
        self._planned.clear()

    def start(
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
        the prefetch ends, the shared levels are sent what they served."""
        try:
            fetched = self._start(keys, deadline_s, pack)
        finally:
            self._planned.set()
        if fetched:
            self.tiers.report_served()

    def _start(self, keys: Sequence[str], deadline_s: float, pack: Pack | None) -> bool:
        """Fetch from ``pack`` now, start the batches for the rest; ``True`` when the pack
        fetched everything (the batches report what was served when they end)."""
        tiers = self.tiers
        if not keys or not any(tiers.fills(d) for d in range(1, len(tiers.levels))):
            return False
        first = tiers.levels[0]
        missing = [k for k in dict.fromkeys(keys) if not _holds(first, k)]
        if not missing:
            return False
        self._deadline = time.monotonic() + deadline_s
        events = {key: threading.Event() for key in missing}
        self._prefetching.update(events)
        if pack is not None and len(missing) >= PACK_MIN_KEYS:
            # Lookups wait on their events meanwhile (the caller runs on a background thread).
            try:
                missing = self._from_pack(pack, missing, events)
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
                tiers.report_served()

        for batch in batches:
            pool.submit(self._batch, batch, events).add_done_callback(batch_done)
        pool.shutdown(wait=False)
        # Whatever is not fetched by the deadline is released: its lookup reads as usual.
        timer = threading.Timer(deadline_s, _set_all, args=(list(events.values()),))
        timer.daemon = True
        timer.start()
        return False

    def _from_pack(
        self, pack: Pack, missing: list[str], events: Mapping[str, threading.Event]
    ) -> list[str]:
        """Backfill what ``pack`` holds of ``missing`` from the first slower level that has
        the pack; the keys still missing. Never raises."""
        name, unpack = pack
        tiers = self.tiers
        for depth in range(1, len(tiers.levels)):
            if not tiers.fills(depth):
                continue
            start = time.perf_counter()
            try:
                data = tiers.levels[depth].peek(name)
                if data is None:
                    continue
                found = unpack(data)
            except Exception as exc:  # a damaged or unreadable pack: fetch entry by entry
                tiers.failed(depth, exc, "pack")
                continue
            elapsed = (time.perf_counter() - start) / max(len(found), 1)
            self._fetched(depth, [(k, *found[k]) for k in missing if k in found], elapsed, events)
            return [k for k in missing if k not in found]
        return missing

    def _fetched(
        self,
        depth: int,
        items: Sequence[tuple[str, bytes, EntryMeta | None]],
        elapsed: float,
        events: Mapping[str, threading.Event],
    ) -> None:
        """Entries read from ``depth``: counted and backfilled by the tiers, then their lookups
        released (they find the local copy)."""
        self.tiers.fetched(depth, items, elapsed)
        for key, _, _ in items:
            events[key].set()

    def _batch(self, batch: list[str], events: Mapping[str, threading.Event]) -> None:
        tiers = self.tiers
        wanted = list(batch)
        try:
            for depth in range(1, len(tiers.levels)):
                if not wanted or time.monotonic() > self._deadline:
                    break
                start = time.perf_counter()
                try:
                    found = tiers.levels[depth].get_many(wanted)
                except Exception as exc:
                    tiers.failed(depth, exc, "prefetch")
                    continue
                elapsed = (time.perf_counter() - start) / max(len(found), 1)
                self._fetched(
                    depth, [(k, *found[k]) for k in wanted if k in found], elapsed, events
                )
                wanted = [k for k in wanted if k not in found]
        except Exception as exc:  # a prefetch must never fail anything: lookups read as usual
            log.debug("compilecache: prefetch failed: %s", exc)
        finally:
            for key in batch:
                events[key].set()


def _holds(level: Store, key: str) -> bool:
    """Whether ``level`` holds ``key`` (by its metadata; a failing level holds nothing)."""
    try:
        return level.stat(key) is not None
    except Exception:
        return False


def _set_all(events: Sequence[threading.Event]) -> None:
    for event in events:
        event.set()
