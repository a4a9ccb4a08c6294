"""The integrity-checking layer between the framework integrations and a store.

:class:`Cache` turns compiles into entries and entries back into payloads. It is the one place
where the principles are enforced for every backend alike:

- a storage error is a counted miss (or a counted failed write) with one warning, never an
  exception into the framework;
- an entry is returned only when its checksum, its signatures (those :class:`Signing` asks
  for) and its key all match; a damaged or misplaced entry is counted as corrupt, removed, and
  reported as a miss;
- an intact entry signed with another key (or unsigned, where signatures are asked for) is
  counted as
  ``foreign`` and reported as a miss, and it is left alone: never removed, never replaced by
  this process, because it may be valid for the clients that hold its key (one host started
  with a wrong COMPILECACHE_SECRET must not empty a fleet's cache);
- an intact entry built for another kind of host (a CPU feature this one lacks, another
  architecture or Python: :class:`HostCheck` with ``live=True``) is counted as ``unrunnable``
  and is a miss; it stays in the store for the hosts that can run it, and this host keeps its
  own compile of that key beside it, under the key with this host's kind appended
  (:func:`own_key`), which it reads next time;
- read-only mode and the minimum compile time are applied here, not in each integration.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from compilecache import entry
from compilecache.config import DEFAULT_LEASE_TTL, DEFAULT_WAIT_TIMEOUT, READ_ONLY_REASON
from compilecache.entry import Entry, EntryHeader
from compilecache.errors import (
    CorruptEntry,
    EntryTooLarge,
    ForeignEntry,
    LevelSkipped,
    ReadOnlyStore,
    StoreUnavailable,
)
from compilecache.host import NO_CPU_TARGET, HostCheck, cpu_target, host_kind
from compilecache.runtime.background import Background
from compilecache.runtime.reader import Reader
from compilecache.runtime.singleflight import SingleFlight
from compilecache.signing import Signing
from compilecache.stats import Stats, function_counter
from compilecache.stores.base import EntryMeta, Store, get_or_claim
from compilecache.stores.capabilities import Claim
from compilecache.stores.tiers import Tiered

if TYPE_CHECKING:
    from compilecache.runtime.prefetch import Prefetcher

log = logging.getLogger("compilecache")
# Per-compile events kept in memory for ``compilecache run`` and ``doctor`` (a bound on a run).
MAX_EVENTS = 10_000
# How long closing waits for the bookkeeping still queued (miss explanations).
SETTLE_S = 5.0
# How long a lookup waits for this process's own write of the same key, still on the background
# thread, before it reads the store as it is.
WRITE_WAIT_S = 30.0
# Between a key and the kind of host whose own entry of that key this is (see own_key).
OWN_KIND_SEP = "~host-"


def own_key(key: str) -> str:
    """Where this host keeps its own compile of ``key`` when the entry under ``key`` was built
    for another kind of host: ``key`` with this host's kind (a digest of its CPU target)."""
    return f"{key}{OWN_KIND_SEP}{host_kind(cpu_target())}"


class Cache:
    """A store plus the entry format, counters and the never-raise policy. The store is held as
    tiers (one level alone is tiers of one level): ``store.levels`` is always there."""

    def __init__(
        self,
        store: Store,
        *,
        stats: Stats | None = None,
        read_only: bool = False,
        min_compile_time: float = 0.0,
        signing: Signing | None = None,
        read_only_reason: str = READ_ONLY_REASON,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        host: HostCheck | None = None,
    ) -> None:
        self.store = Tiered.of(store)
        self.stats = stats or Stats()
        self.read_only = read_only
        self.min_compile_time = min_compile_time
        self.signing = signing  # what this cache signs its writes with
        self.reader = Reader(signing)  # and the trust policy it reads with
        self.read_only_reason = read_only_reason
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()
        # Keys under which this process found an entry signed with another key: it does not
        # write over them (and so never leads their compile for others), unless every level it
        # writes is this host's own (own_levels_only, set by the session for a reader of a
        # fleet's cache): there it keeps its own compile, and the shared entry stays as it is.
        self._foreign: set[str] = set()
        self.own_levels_only = False
        # Keys whose entry this process found damaged (and removed), with why: the miss that
        # follows is explained by that, not by the nearest other entry.
        self.damaged: dict[str, str] = {}
        # Whether what a read finds can run on this host (never None: a check that cannot be
        # forgotten), and the keys whose entry was built for another kind of host, with why:
        # this host's compiles of those keys go to their own_key.
        self.host = host or HostCheck(live=True)
        self.unrunnable: dict[str, str] = {}
        # Why the store took no write though this process may write (read-only media), once.
        self.store_read_only = ""
        self._beside: set[str] = set()
        # Set by the session: a label for this run's history records, and (under
        # ``compilecache run`` / ``doctor``) a list that collects per-compile events in memory.
        self.run_id = ""
        self.events: list[dict[str, Any]] | None = None
        # Bookkeeping that need not hold up a compile (miss explanations), in order.
        self.background = Background()
        # Entries handed to the background thread by save_later and not written yet: a lookup
        # of one in this process waits for its write (it would otherwise miss, and compile again).
        self._writing: dict[str, threading.Event] = {}
        self._writing_lock = threading.Lock()
        self._writing_pid = os.getpid()
        # Run by the session before its exit writes (integrations publish what they kept
        # locally, e.g. XLA's autotune directory); each must never raise.
        self.finishers: list[Callable[[], None]] = []
        # Set by the session when it prefetches: told of each lookup before it reads.
        self.prefetcher: Prefetcher | None = None
        # Single-flight compiles (load_or_lead): only where the store can coordinate.
        self._flight: SingleFlight | None = None
        leases = self.store.leases
        if not read_only and wait_timeout > 0 and leases is not None:
            self._flight = SingleFlight(
                leases,
                stats=self.stats,
                warn=self.warn_once,
                lease_ttl=lease_ttl,
                wait_timeout=wait_timeout,
                writes=self.writes,
            )

    def _warn_failure(self, what: str, exc: Exception) -> None:
        """One warning per kind of failure; none for an outage a level's guard reported."""
        if isinstance(exc, StoreUnavailable) and exc.reported:
            log.debug("compilecache: %s %s failed: %s", what, self.store.url, exc)
            return
        self.warn_once(f"{what}:{type(exc).__name__}", f"{what} {self.store.url} failed: {exc}")

    def count_error(self, framework: str, exc: Exception) -> None:
        """Count a storage failure, once: the first failure of a level's outage, which its guard
        warned about, is counted in the total by that guard (one error per outage, whichever
        level and whoever noticed: see ``Session.stats``), and here only for its framework."""
        if not (isinstance(exc, StoreUnavailable) and exc.reported):
            self.stats.add("errors", framework=framework)
        elif framework:
            self.stats.add(f"{framework}.errors")  # the framework that met it, all the same

    def warn_once(self, category: str, message: str) -> None:
        """Log ``message`` as a warning the first time ``category`` occurs, at debug later."""
        with self._warn_lock:
            first = category not in self._warned
            self._warned.add(category)
        log.log(logging.WARNING if first else logging.DEBUG, "compilecache: %s", message)

    def add_event(self, event: dict[str, Any]) -> None:
        """Keep ``event`` for the run spool when events are collected (bounded)."""
        events = self.events
        if events is not None and len(events) < MAX_EVENTS:
            events.append(event)

    def read(self, key: str) -> bytes | None:
        """The bytes under ``key``, read as a lookup: told to the prefetcher first (recorded for
        the job's manifest; a key on its way is waited for). Raises what the store raises."""
        if self.prefetcher is not None:
            self.prefetcher.before_read(key)
        self.await_write(key)
        return self.store.get(key)

    def await_write(self, key: str) -> None:
        """Wait (up to ``WRITE_WAIT_S``) for this process's write of ``key`` handed to the
        background thread by :meth:`save_later`, if one is under way. Never on that thread:
        it would wait for itself."""
        with self._writing_lock:
            if os.getpid() != self._writing_pid:
                # A forked child: the parent's writes are the parent's (its queue is not here).
                self._writing.clear()
                self._writing_pid = os.getpid()
            writing = self._writing.get(key)
        if writing is not None and not self.background.on_its_thread():
            writing.wait(WRITE_WAIT_S)

    def load(self, framework: str, key: str) -> Entry | None:
        """The verified entry stored under ``key``, or ``None`` (counted as a miss)."""
        return self._load(framework, key, count_miss=True)[0]

    def load_uncounted(self, framework: str, key: str) -> Entry | None:
        """:meth:`load` for an entry that is not a compile (a framework's record about one, such
        as a JAX trace): read as a lookup (listed for the job's manifest, copied between levels),
        verified and checked for this host the same way, but neither a hit nor a miss. Failures,
        damaged entries and entries signed with another key are counted (as errors, corrupt and
        foreign) as for any read, but not as misses."""
        found, _ = self._decoded(framework, key, self.read, count_miss=False)
        if found is None or self.refuses(key, found[0].header):
            return None
        return found[0]

    def probe(self, framework: str, key: str) -> Entry | None:
        """The verified entry under ``key`` for a caller that looks it up again (with
        :meth:`load`) when this finds nothing usable, such as a stored JAX trace's executable
        read before the trace is skipped: read as a lookup (listed for the job's manifest,
        copied between levels) but neither a hit nor a miss, and what it cannot use (a damaged
        entry, one signed with another key or built for another host, a failing store) is left
        to that lookup, to count, say and remove once. Never raises."""
        try:
            data = self.read(key)
            if data is None:
                return None
            found = self.reader.decode(data, key)
        except Exception as exc:
            log.debug("compilecache: probe of %s found nothing usable: %s", key, exc)
            return None
        if found.header.framework != framework or self.host.reason(found.header) is not None:
            return None
        return found

    def peek(self, framework: str, key: str) -> Entry | None:
        """The verified entry under ``key`` for bookkeeping (an index, a list), read without
        counting a hit or a miss and without copying it between levels; ``None`` when there is
        none or it is unusable. A store that fails is counted and warned about as for a lookup.
        Never raises."""
        try:
            data = self.store.peek(key)
        except LevelSkipped:
            return None  # the level's outage was counted when it began
        except Exception as exc:
            self.count_error(framework, exc)
            self._warn_failure("read from", exc)
            return None
        if data is None:
            return None
        try:
            found = self.reader.decode(data, key)
        except Exception as exc:
            log.debug("compilecache: %s not read: %s", key, exc)
            return None
        if found.header.framework != framework:
            return None
        if not self.refuses(key, found.header):
            return found
        return None if OWN_KIND_SEP in key else self.peek(framework, own_key(key))

    def read_ahead(self, framework: str, key: str) -> tuple[Entry, int, float] | None:
        """The verified entry under ``key`` (or this host's own compile of it, where the stored
        one cannot run here), its stored size and the seconds its read took, for a framework
        preparing a lookup the job is expected to make: nothing is counted or recorded, nothing
        is copied between levels but what a lookup would copy, and every failure is ``None``
        (the lookup itself then reads, counts and explains as usual). Never raises. A framework
        that serves the entry calls :meth:`count_read_ahead` when the lookup comes."""
        start = time.perf_counter()
        for name in (key, own_key(key)):
            try:
                if self.prefetcher is not None:
                    self.prefetcher.wait_for(name)
                data = self.store.get(name)
                if data is None:
                    return None
                found = self.reader.decode(data, name)
            except Exception as exc:
                log.debug("compilecache: %s not read ahead: %s", name, exc)
                return None
            if found.header.framework != framework:
                return None
            if self.host.reason(found.header) is None:
                return found, len(data), time.perf_counter() - start
        return None

    def count_read_ahead(
        self, framework: str, key: str, found: Entry, size: int, elapsed: float
    ) -> None:
        """A lookup of ``key`` was served what :meth:`read_ahead` read (``size`` stored bytes,
        read in ``elapsed`` seconds): count the hit, and list the lookup for the job's
        manifest, as :meth:`load` would have."""
        if self.prefetcher is not None:
            self.prefetcher.record(key)
        self._count_hit(framework, key, found, size, elapsed)

    def load_or_lead(self, framework: str, key: str, *, lead: bool = True) -> Entry | None:
        """:meth:`load`, coordinated with other processes missing the same key (single-flight).

        On a miss, either this process takes the key's lease and gets ``None``: it compiles,
        saves, then calls :meth:`finish_lead`; or another process holds the lease, and this one
        waits for that entry (a hit, counted as such, plus ``waited``) until the lease is free
        again (then it leads), or COMPILECACHE_WAIT_TIMEOUT passes (then it compiles anyway).
        ``lead=False``: this process will not save what it compiles (JAX writes only from its
        process 0): it waits for a holder's entry, but never holds a lease others would wait on.
        """
        flight = self._flight
        if flight is None:
            return self._load(framework, key, count_miss=True)[0]
        claims: list[Claim | None] = [None]

        def read_or_claim(k: str) -> bytes | None:
            # The read and, on a miss, the lease claim: one round trip where the store can.
            if self.prefetcher is not None:
                self.prefetcher.before_read(k)
            self.await_write(k)
            found, claims[0] = get_or_claim(self.store, k, flight.lease_ttl)
            return found[0] if found is not None else None

        found, clean_miss = self._load(framework, key, count_miss=False, read=read_or_claim)
        claim = claims[0]
        if found is not None or not clean_miss:
            if claim is not None and claim.token:  # the read missed, then the entry was bad
                flight.release_claim(key, claim.token)
            return found
        return flight.after_miss(
            framework,
            key,
            lambda: self._load(framework, key, count_miss=False),
            lead=lead,
            claim=claim,
        )

    def claim_writer(self, key: str) -> bool:
        """Whether this process writes ``key``'s entry, decided without waiting: it took the
        key's lease, or nothing coordinates processes here; not when another process holds the
        lease (see :meth:`SingleFlight.claim_writer`). Call :meth:`finish_lead` once written or
        given up."""
        if self._flight is None:
            return True
        return self._flight.claim_writer(key)

    def finish_lead(self, key: str) -> None:
        """The compile of ``key`` that :meth:`load_or_lead` handed this process is over (saved
        or not): release its lease so that waiting processes stop waiting. Never raises. A lease
        whose entry was written is released on the background thread (waiters already find the
        entry; on a local disk the release cost a cold JAX compile 0.7 ms of its 3 ms)."""
        if self._flight is not None:
            self._flight.finish(key, later=self.background.add)

    def save_later(self, key: str, write: Callable[[], object], *, awaited: bool = False) -> None:
        """Run ``write`` (which saves ``key``'s entry) on the background thread, then end the
        lease that :meth:`load_or_lead` handed this process for ``key``: the compile returns
        without waiting for the disk, and waiting processes find the entry when the lease ends.
        The write is never dropped: a full queue, or the deadline at exit, runs it on the
        caller's thread instead. ``write`` must not raise. ``awaited``: a lookup of ``key`` in
        this process waits for the write (for a framework that does not keep what it handed)."""
        flight = self._flight
        if flight is not None:
            flight.hand_off(key)
        written = threading.Event()
        if awaited:
            with self._writing_lock:
                self._writing[key] = written

        def work() -> None:
            try:
                write()
            finally:
                with self._writing_lock:
                    if self._writing.get(key) is written:
                        del self._writing[key]
                written.set()
                if flight is not None:
                    flight.finish(key)

        self.background.add(work, keep=True)

    def finish_thread_leads(
        self, defer: Callable[[str], bool] | None = None, grace: float = 0.0
    ) -> None:
        """Release the leases this thread still holds (its compiles ended without a save);
        those for which ``defer(key)`` is true are kept until their save or ``grace`` seconds."""
        if self._flight is not None:
            self._flight.finish_thread(defer, grace)

    def _load(
        self,
        framework: str,
        key: str,
        *,
        count_miss: bool,
        read: Callable[[str], bytes | None] | None = None,
    ) -> tuple[Entry | None, bool]:
        """:meth:`load`, also saying whether a ``None`` is a clean miss (the store answered that
        it holds nothing); ``count_miss=False`` leaves a clean miss uncounted. ``read``: how to
        read the bytes (default: the store's ``get``)."""
        start = time.perf_counter()
        found, clean_miss = self._decoded(framework, key, read or self.read)
        if found is None:
            if clean_miss and count_miss:
                self.stats.add("misses", framework=framework)
            return None, clean_miss
        entry_, size = found
        if self.refuses(key, entry_.header):
            # Built for another kind of host: this host's own compile of the key, if it has one.
            found, clean_miss = self._decoded(framework, own_key(key), self.read)
            if found is not None and self.host.reason(found[0].header) is not None:
                found = None
            if found is None:
                if clean_miss:
                    self.stats.add("misses", framework=framework)
                self.stats.add("unrunnable", framework=framework)
                # Not a clean miss: the key's entry is there, so this process leads nothing.
                return None, False
            entry_, size = found
        self._count_hit(framework, key, entry_, size, time.perf_counter() - start)
        return entry_, False

    def _decoded(
        self,
        framework: str,
        key: str,
        read: Callable[[str], bytes | None],
        *,
        count_miss: bool = True,
    ) -> tuple[tuple[Entry, int] | None, bool]:
        """The verified entry under ``key`` and its stored size, or ``None`` and whether that
        is a clean miss (nothing stored; left uncounted). A failure, a damaged entry or one
        signed with another key is counted (as an error, corrupt or foreign, and a miss unless
        ``count_miss`` is false) and is not a clean miss."""
        try:
            data = read(key)
        except CorruptEntry as exc:
            self._corrupt(framework, key, exc, remove=False, count_miss=count_miss)
            return None, False
        except Exception as exc:  # any backend failure must degrade to a miss
            self.count_error(framework, exc)
            if count_miss:
                self.stats.add("misses", framework=framework)
            self._warn_failure("read from", exc)
            return None, False
        if data is None:
            return None, True
        try:
            found = self.reader.decode(data, key)
            if found.header.framework != framework:
                raise CorruptEntry(f"entry belongs to {found.header.framework!r}")
        except CorruptEntry as exc:
            self._corrupt(framework, key, exc, remove=True, count_miss=count_miss)
            return None, False
        except ForeignEntry as exc:
            self.note_foreign(framework, key, exc, count_miss=count_miss)
            return None, False
        except Exception as exc:  # a store returning something other than bytes
            self.stats.add("errors", framework=framework)
            if count_miss:
                self.stats.add("misses", framework=framework)
            self.warn_once(
                f"get:{type(exc).__name__}", f"read from {self.store.url} returned junk: {exc}"
            )
            return None, False
        return (found, len(data)), False

    def _count_hit(self, framework: str, key: str, found: Entry, size: int, elapsed: float) -> None:
        # A load slower than the compile it replaces saved nothing; it costs no negative time
        # (the cost is in load_time_s).
        saved = max(0.0, found.header.compile_time_s - elapsed)
        self.stats.add("hits", framework=framework)
        self.stats.add("bytes_read", size, framework=framework)
        self.stats.add("load_time_s", elapsed, framework=framework)
        self.stats.add("compile_time_saved_s", saved, framework=framework)
        name = found.header.name
        if not found.header.extra.get(entry.INTERNAL):  # a function's, not a framework part's
            self.stats.add(function_counter(framework, name, "hits"))
            self.stats.add(function_counter(framework, name, "compile_time_saved_s"), saved)
        self.add_event({"event": "hit", "framework": framework, "name": name, "key": key})

    def refuses(self, key: str, header: EntryHeader) -> bool:
        """Whether the entry ``header`` found under ``key`` cannot run on this host. If so, the
        reason explains the miss, and this host's compile of ``key`` is saved under
        :func:`own_key`. Said once per process, at info level (a mixed fleet is normal;
        ``explain`` and ``stats`` count it)."""
        reason = self.host.reason(header)
        if reason is None:
            return False
        if OWN_KIND_SEP not in key:
            self._remember_unrunnable(key, reason)
        return True

    def _remember_unrunnable(self, key: str, reason: str) -> None:
        with self._warn_lock:
            first = not self.unrunnable
            if len(self.unrunnable) < MAX_EVENTS:
                self.unrunnable[key] = reason
                if reason != NO_CPU_TARGET:  # another host's: kept; else replaced
                    self._beside.add(key)
        log.log(
            logging.INFO if first else logging.DEBUG,
            "compilecache: entry %s cannot run on this host (%s): a miss; %s",
            key,
            reason,
            "this host's compile is kept beside it, for the hosts that can run it"
            if reason != NO_CPU_TARGET
            else "this host's compile replaces it",
        )

    def _corrupt(
        self, framework: str, key: str, exc: Exception, *, remove: bool, count_miss: bool = True
    ) -> None:
        if len(self.damaged) < MAX_EVENTS:
            self.damaged[key] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        self.stats.add("corrupt", framework=framework)
        if count_miss:
            self.stats.add("misses", framework=framework)
        self.warn_once("corrupt", f"entry {key} is corrupt ({exc}); treated as a miss and removed")
        if remove and not self.read_only:
            try:
                self.store.delete(key)
            except Exception as delete_exc:
                log.debug("compilecache: could not remove corrupt entry %s: %s", key, delete_exc)

    def note_foreign(
        self, framework: str, key: str, exc: ForeignEntry, *, count_miss: bool = True
    ) -> None:
        """An intact entry this process cannot verify: a miss (counted unless the caller counts
        its misses apart), left in place, not replaced; one warning per process."""
        self.stats.add("foreign", framework=framework)
        if count_miss:
            self.stats.add("misses", framework=framework)
        with self._warn_lock:
            self._foreign.add(key)
        if self.signing is not None and self.signing.verifies_writers:
            why = (
                "Only entries signed by a key in COMPILECACHE_TRUSTED_KEYS (or this process's "
                "own COMPILECACHE_SIGNING_KEY_FILE) are accepted: this one was written by "
                "another writer, or before signing was set up."
            )
        else:
            why = (
                "COMPILECACHE_SECRET (or COMPILECACHE_SECRET_FILE) probably differs from the "
                "key the entries in this store were signed with (or they were written without "
                "one)."
            )
        self.warn_once(
            "foreign",
            f"entry {key}: {exc}. {why} Such entries are misses, left in place and not "
            "overwritten by this process; the 'foreign' counter says how many.",
        )

    def writes(self, key: str) -> bool:
        """Whether :meth:`save` would store a compile of ``key`` (not read-only, and no entry
        signed with another key seen there, unless only this host's own levels are written)."""
        return not self.read_only and (self.own_levels_only or key not in self._foreign)

    def is_foreign(self, key: str) -> bool:
        """Whether this process found an entry signed with another key under ``key``."""
        with self._warn_lock:
            return key in self._foreign

    def save(
        self,
        header: EntryHeader,
        payload: bytes,
        *,
        compress: bool | None = None,
        any_time: bool = False,
        counted: bool = True,
    ) -> bool:
        """Store ``payload``; ``False`` when skipped (read-only, too fast, an entry signed with
        another key is there) or failed (counted). ``any_time``: not a compile of its own (a
        file a compile left), so COMPILECACHE_MIN_COMPILE_TIME does not apply. ``counted=False``:
        not a compile (a framework's record about one), so not among the writes."""
        framework = header.framework
        if self.read_only:
            self.stats.add("skipped", framework=framework)
            return False
        if header.compile_time_s < self.min_compile_time and not any_time:
            self.stats.add("skipped", framework=framework)
            return False
        if header.key in self._foreign and not self.own_levels_only:
            self.stats.add("skipped", framework=framework)
            return False
        looked_up = header.key
        if looked_up in self._beside:
            header = replace(header, key=own_key(looked_up))
        try:
            data = entry.encode(header, payload, compress=compress, signing=self.signing)
            meta = EntryMeta(framework, header.name, header.compile_time_s)
            self.store.put(header.key, data, meta)
        except (LevelSkipped, ReadOnlyStore, EntryTooLarge) as exc:
            # Not failures of this write: a level in back-off after a failure that was counted
            # and warned about (an outage costs one error), a store that takes no writes, an
            # entry larger than the store's whole bound (the store warned once).
            self.stats.add("skipped", framework=framework)
            if isinstance(exc, ReadOnlyStore):
                self._say_read_only()
            return False
        except Exception as exc:  # a failed write must never fail the user's compile
            self.count_error(framework, exc)
            self._warn_failure("write to", exc)
            return False
        if self._flight is not None:
            self._flight.wrote(looked_up)
        if not counted:
            return True
        self.stats.add("writes", framework=framework)
        self.stats.add("bytes_written", len(data), framework=framework)
        self.stats.add("compile_time_s", header.compile_time_s, framework=framework)
        if not header.extra.get(entry.INTERNAL):
            self.stats.add(function_counter(framework, header.name, "writes"))
        return True

    def _say_read_only(self) -> None:
        """A store that takes no writes though this process may write (read-only media): said
        once. Under ``compilecache run`` as one line after the run's summary (once for all its
        processes), else as a warning of this process."""
        with self._warn_lock:
            if self.store_read_only:
                return
            self.store_read_only = (
                f"{self.store.url} is read-only: reads are served, nothing is written"
            )
        if self.events is not None:
            self.add_event({"event": "setting", "summary": self.store_read_only})
        else:
            self.warn_once("read-only", self.store_read_only)

    def skip_reason(self, compile_time_s: float, key: str | None = None) -> str:
        """Why :meth:`save` stored nothing for a compile of ``compile_time_s`` seconds (of
        ``key``, when given) for miss explanations: read-only, below the minimum compile time,
        an entry signed with another key left in place, or a failed write."""
        if self.read_only:
            return self.read_only_reason
        if self.store_read_only:
            return self.store_read_only
        if compile_time_s < self.min_compile_time:
            return (
                f"compiled in {compile_time_s:.2f}s, below "
                f"COMPILECACHE_MIN_COMPILE_TIME={self.min_compile_time:g}s"
            )
        if key is not None and key in self._foreign and not self.own_levels_only:
            return "an entry signed with another key is stored there; left in place"
        return "the write failed (see the warning)"

    def settle(self, timeout: float = SETTLE_S) -> bool:
        """Wait (up to ``timeout``) for the background bookkeeping queued so far."""
        return self.background.settle(timeout)

    def wait_writes(self, timeout: float = SETTLE_S) -> bool:
        """Wait (up to ``timeout``) for the entry writes handed to :meth:`save_later`."""
        return self.background.wait_kept(timeout)

    def release_leases(self) -> None:
        """Give up every lease this process still holds or has handed to the background."""
        if self._flight is not None:
            self._flight.release_all()

    def close(self) -> None:
        self.settle()
        self.release_leases()
        try:
            self.store.close()
        except Exception as exc:  # closing is best effort, and never fails the user's program
            log.debug("compilecache: closing %s failed: %s", self.store.url, exc)
