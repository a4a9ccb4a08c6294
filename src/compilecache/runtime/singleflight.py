"""Single-flight compiles: when several processes miss the same key at once, one compiles it and
the others wait for its entry instead of compiling the same function N times.

The protocol, per key, after a lookup that found nothing (:meth:`Cache.load_or_lead`):

1. Claim the key's lease in the store (:meth:`~compilecache.stores.capabilities.Leases.claim`: an
   exclusively created lock file, a Redis ``SET NX PX``, a conditional object create). Redis
   answers the claim in the same round trip as the missing read (``get_or_claim``), and its
   claim also says whether the entry has appeared meanwhile or the key is marked unwritten
   (below), so a miss costs one round trip to Redis in all.
2. Won: unless the store checked already, look once more (the previous holder may have published
   its entry and released the lease between our lookup and our claim). Still nothing: this
   process leads. It compiles, saves, and releases the lease (``finish``). While it compiles, a
   heartbeat thread renews the lease every third of its TTL, so a short TTL covers an hour-long
   compile and a compiler that dies (its heartbeat with it) blocks the others for at most one
   TTL.
3. Held by another process: wait, polling the store with back-off (50 ms growing to 1 s) until
   - the entry appears: a hit, counted as a hit (and ``waited``), never as a miss;
   - an entry appears that this process cannot use (corrupt, or signed with another key): a miss,
     counted by the lookup; compile at once, without the lease;
   - the lease is free again (its holder died and the lease expired): take it and lead
     (``lease_takeovers``);
   - the lease is free and its holder left an *unwritten* mark: compile without a lease (see
     below);
   - the wait timeout passes: compile anyway, without the lease (``wait_timeouts``, one warning).

Compiles that end without an entry (JAX functions with host callbacks, torch graphs torch
declines to cache, compiles below the minimum time, failed writes) must not make the others
compile one after another, each holding the lease in turn: a leader that finishes without writing
marks the key *unwritten* (a second lease, ``<key>#unwritten``, left to expire after
UNWRITTEN_TTL) before releasing its lease, and a process that takes a lease checks that mark
first: when it is there, it compiles at once, without a lease, as if single-flight were off.

Single-flight is an optimisation and nothing depends on it for correctness: entries are verified
on every read and published atomically. Whenever coordination fails (a store error, a lease lost
to a stalled heartbeat) the outcome is a duplicate compile, never a wrong result, a raised
exception or an unbounded wait.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compilecache.stats import Stats
from compilecache.stores.capabilities import UNWRITTEN_SUFFIX, Claim, Leases

if TYPE_CHECKING:
    from compilecache.entry import Entry

log = logging.getLogger("compilecache")

# Poll intervals of a waiting process: short at first (most compiles take well under a second),
# growing to MAX_POLL, so that hundreds of waiters cost a few requests per second on a store.
FIRST_POLL = 0.05
MAX_POLL = 1.0
POLL_GROWTH = 1.5

# How long a key stays marked unwritten: long enough for every waiter (polling at least every
# MAX_POLL) and for processes starting a little later to see it; a key whose next compile is
# written after all only loses single-flight for this long.
UNWRITTEN_TTL = 120.0

# A lookup: the entry or None, and whether a None is a clean (not yet counted) miss.
Lookup = Callable[[], "tuple[Entry | None, bool]"]
# A warning function: (category, message), warned once per category (Cache.warn_once).
Warn = Callable[[str, str], None]


def _always(key: str) -> bool:
    return True


@dataclass
class _Lead:
    key: str
    token: str
    thread: int
    since: float
    written: bool = False
    # Set when the compile returned before its entry could be written (torch writes an
    # AOTAutograd entry at the first backward): the lease ends at this time at the latest.
    deadline: float | None = None
    # Held while the heartbeat renews the lease and while it is given up, so that a renewal
    # cannot write the lease file again after its release; ``ended`` once given up.
    guard: threading.Lock = field(default_factory=threading.Lock)
    ended: bool = False
    # Set when the entry's write was handed to another thread: the compiling thread's end no
    # longer ends the lease; finish() (after the write) or release_all() does.
    handed: bool = False


class SingleFlight:
    """The leases this process holds, their heartbeat, and the waiting logic.

    It takes only what it uses: the store's leases (``leases``), the counters it adds to
    (``stats``), a warn-once function (``warn``), and ``writes(key)``, whether this process will
    save what it compiles for ``key`` (``False``: it never holds that key's lease, since no one
    should wait for an entry that will not come).
    """

    def __init__(
        self,
        leases: Leases,
        *,
        stats: Stats,
        warn: Warn,
        lease_ttl: float,
        wait_timeout: float,
        writes: Callable[[str], bool] = _always,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.leases = leases
        self.stats = stats
        self._warn = warn
        self._writes = writes
        self.lease_ttl = lease_ttl
        self.wait_timeout = wait_timeout
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._leads: dict[str, _Lead] = {}
        # Leads whose release was handed to ``later`` and has not run yet: release_all ends
        # them, so that a background queue cut short at exit does not leave leases behind.
        self._ending: dict[str, _Lead] = {}
        self._heartbeat: threading.Thread | None = None
        self._pid = os.getpid()

    # -- waiting -----------------------------------------------------------------------------

    def after_miss(
        self,
        framework: str,
        key: str,
        lookup: Lookup,
        *,
        lead: bool = True,
        claim: Claim | None = None,
    ) -> Entry | None:
        """Called after a clean miss that was not counted yet. Returns the entry (waited for, a
        hit) or ``None``: the caller compiles, holding the key's lease when it got one (never
        with ``lead=False``: a process that will not save its compile only waits). ``claim``:
        the lease claim the missing read already made (``Leases.get_or_claim``), if any."""
        self._check_fork()
        with self._lock:
            ours = key in self._leads
        if ours:
            # This process already compiles the key (torch can look a graph up again inside its
            # own compile): waiting would wait on ourselves until the timeout.
            self.stats.add("misses", framework=framework)
            if claim is not None and claim.token:  # cannot be won while we hold it; be safe
                self._release(key, claim.token)
            return None
        start = self._clock()
        deadline = start + self.wait_timeout
        delay = FIRST_POLL
        waited = False
        while True:
            if claim is None:
                try:
                    claim = self.leases.claim(key, self.lease_ttl)
                except Exception as exc:  # a store that cannot coordinate: compile, uncoordinated
                    log.debug("compilecache: no lease for %s: %s", key, exc)
                    self._lead(framework, key, None)
                    return None
            if claim.state != "held":
                return self._claimed(
                    framework, key, lookup, claim, lead=lead, waited=waited, start=start
                )
            claim = None
            now = self._clock()
            if not waited:
                log.info("compilecache: another process compiles %s; waiting for its entry", key)
            if now >= deadline:
                self.stats.add("wait_timeouts", framework=framework)
                self.stats.add("wait_time_s", now - start, framework=framework)
                self._warn(
                    "wait-timeout",
                    f"waited {now - start:.0f}s for another process to compile {key}; "
                    "compiling it here (COMPILECACHE_WAIT_TIMEOUT)",
                )
                self._lead(framework, key, None)
                return None
            waited = True
            self._sleep(min(delay, deadline - now))
            delay = min(delay * POLL_GROWTH, MAX_POLL)
            found, clean_miss = lookup()
            if found is not None:
                self._count_wait(framework, found, start)
                return found
            if not clean_miss:
                return None  # the store failed or the entry was corrupt: a miss, counted there

    def _claimed(
        self,
        framework: str,
        key: str,
        lookup: Lookup,
        claim: Claim,
        *,
        lead: bool,
        waited: bool,
        start: float,
    ) -> Entry | None:
        """Go on from a claim that was not "held": a hit after all, or this process compiles,
        holding the lease when it won it and will save what it compiles."""
        token = claim.token if claim.state == "won" else None
        clean_miss = True  # a checked claim saw no entry
        if claim.state == "present" or not claim.checked:
            # Look once more: the previous holder may have published and released between our
            # lookup and our claim.
            found, clean_miss = lookup()
            if found is not None:
                if token:
                    self._release(key, token)
                if waited:
                    self._count_wait(framework, found, start)
                return found
        unwritten = claim.state == "unwritten" or (
            not claim.checked and bool(token) and self._marked_unwritten(key)
        )
        if unwritten:
            # The last compile of this key wrote nothing: no one would wait for ours.
            if token:
                self._release(key, token)
            self.stats.add("unwritten_skips", framework=framework)
            self._lead(framework, key, None, count_miss=clean_miss)
            return None
        if token and (not lead or not self._writes(key)):
            # This process will not save the key (lead=False, or the lookup found an entry
            # signed with another key, which it leaves in place): no lease.
            self._release(key, token)
            token = None
        elif token and claim.took_over and not waited:
            # The holder was killed holding it (a process of this host that no longer runs):
            # taken at once, counted, and said in the log.
            self.stats.add("lease_takeovers", framework=framework)
            log.info("compilecache: took over %s from a process that no longer runs", key)
        elif token and waited:
            # The holder let its lease expire without an entry: it died, or stalled. The wait
            # is counted and said (once), so a slow start has its reason in the output.
            waited_s = self._clock() - start
            self.stats.add("lease_takeovers", framework=framework)
            self.stats.add("wait_time_s", waited_s, framework=framework)
            self._warn(
                "lease-takeover",
                f"waited {waited_s:.1f}s for another process to compile {key}, which ended or "
                "stalled without writing it (killed?); compiling it here",
            )
        # A failed lookup (store error, corrupt entry) counted its miss already. A "present"
        # entry that a clean lookup no longer found was removed meanwhile: compile, no lease.
        self._lead(framework, key, token, count_miss=clean_miss)
        return None

    def _count_wait(self, framework: str, found: Entry, start: float) -> None:
        waited_s = self._clock() - start
        stats = self.stats
        stats.add("waited", framework=framework)
        stats.add("wait_time_s", waited_s, framework=framework)
        # The lookup counted the entry's whole compile time as saved; this process spent part of
        # it waiting.
        stats.add("compile_time_saved_s", -min(waited_s, found.header.compile_time_s), framework)
        log.info("compilecache: waited %.2fs for %s", waited_s, found.header.key)

    def _lead(
        self, framework: str, key: str, token: str | None, *, count_miss: bool = True
    ) -> None:
        if count_miss:
            self.stats.add("misses", framework=framework)
        if token:  # NO_COORDINATION ("") and None: nothing to hold
            with self._lock:
                self._leads[key] = _Lead(key, token, threading.get_ident(), self._clock())
                self._ensure_heartbeat()

    def claim_writer(self, key: str) -> bool:
        """Take ``key``'s lease if it is free, without waiting: ``True`` when this process holds
        it now (it writes the entry, then :meth:`finish`), or when the store cannot say;
        ``False`` when another process holds it. For an entry no one should wait for (torch's
        Dynamo package, looked up where the program calls torch.compile, written after its whole
        first step): the others go on without it, and leave the writing to the holder."""
        if not self._writes(key):
            return False  # it will not save the entry: the lease is left to one that will
        try:
            token = self.leases.acquire(key, self.lease_ttl)
        except Exception as exc:  # no coordination: every process writes, as without leases
            log.debug("compilecache: could not claim %s: %s", key, exc)
            return True
        if token is None:
            return False
        self._lead("", key, token, count_miss=False)
        return True

    # -- finishing ---------------------------------------------------------------------------

    def wrote(self, key: str) -> None:
        """The entry of ``key`` (led here) was written: its end needs no unwritten mark."""
        with self._lock:
            lead = self._leads.get(key)
            if lead is not None:
                lead.written = True

    def hand_off(self, key: str) -> None:
        """The compile of ``key`` is over and its entry is being written on another thread: keep
        the lease (renewed) past the compiling thread's end, until :meth:`finish`."""
        with self._lock:
            lead = self._leads.get(key)
            if lead is not None:
                lead.handed = True

    def finish(self, key: str, later: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Release the lease on ``key`` if this process holds it. Never raises.

        ``later``: where the entry was written, hand the release to it (a background queue)
        instead of making the compile wait for it: waiters poll for the entry, not the lease,
        and find it already; a release that never comes expires with the lease."""
        with self._lock:
            lead = self._leads.pop(key, None)
        if lead is None:
            return
        if later is not None and lead.written:
            with self._lock:
                self._ending[key] = lead
            later(functools.partial(self._end_handed, lead))
        else:
            self._end(lead)

    def _end_handed(self, lead: _Lead) -> None:
        """Run a release handed to ``later``, unless :meth:`release_all` ran it already."""
        with self._lock:
            if self._ending.get(lead.key) is not lead:
                return
        # Left in ``_ending`` until it is done: a release_all() at exit meanwhile waits for it
        # (on the lead's guard) instead of letting the process end between its two steps.
        self._end(lead)
        with self._lock:
            if self._ending.get(lead.key) is lead:
                del self._ending[lead.key]

    def finish_thread(self, defer: Callable[[str], bool] | None = None, grace: float = 0.0) -> None:
        """Release the leases taken by this thread (its compile ended, written or not).

        ``defer(key)`` true: the entry is written later (torch's AOTAutograd entry, at the first
        backward); keep that lease until :meth:`finish` or ``grace`` seconds from now.
        """
        if not self._leads:
            return
        me = threading.get_ident()
        now = self._clock()
        ending: list[_Lead] = []
        with self._lock:
            for lead in list(self._leads.values()):
                if lead.thread != me or lead.deadline is not None or lead.handed:
                    continue
                if defer is not None and not lead.written and defer(lead.key):
                    lead.deadline = now + grace
                    continue
                del self._leads[lead.key]
                ending.append(lead)
        for lead in ending:
            self._end(lead)

    def release_all(self) -> None:
        with self._lock:
            leads = [*self._leads.values(), *self._ending.values()]
            self._leads, self._ending = {}, {}
        if os.getpid() != self._pid:
            return  # a forked child does not own its parent's leases
        for lead in leads:
            self._end(lead)

    def held(self) -> list[str]:
        """Keys whose lease this process holds (for tests and diagnostics)."""
        with self._lock:
            return sorted(self._leads)

    def _end(self, lead: _Lead) -> None:
        """Give a lead's lease up; mark the key unwritten first when no entry was written."""
        with lead.guard:  # held to the end: a second _end returns once the first is done
            if lead.ended:
                return
            lead.ended = True
            if not lead.written:
                try:
                    self.leases.acquire(lead.key + UNWRITTEN_SUFFIX, UNWRITTEN_TTL)
                except Exception as exc:  # then the others may compile one after another
                    log.debug("compilecache: could not mark %s unwritten: %s", lead.key, exc)
            self._release(lead.key, lead.token)

    def _marked_unwritten(self, key: str) -> bool:
        """Whether the last compile of ``key`` ended without an entry (its mark is held)."""
        try:
            probe = self.leases.acquire(key + UNWRITTEN_SUFFIX, self.lease_ttl)
        except Exception as exc:
            log.debug("compilecache: could not read the unwritten mark of %s: %s", key, exc)
            return False
        if probe:
            self._release(key + UNWRITTEN_SUFFIX, probe)
        return probe is None

    def release_claim(self, key: str, token: str) -> None:
        """Give back a lease a read claimed but that is not needed after all. Never raises."""
        self._release(key, token)

    def _release(self, key: str, token: str) -> None:
        try:
            self.leases.release(key, token)
        except Exception as exc:  # it expires on its own
            log.debug("compilecache: could not release the lease on %s: %s", key, exc)

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            with self._lock:
                self._leads.clear()
                self._ending.clear()
                self._heartbeat = None
                self._pid = os.getpid()

    # -- the heartbeat -----------------------------------------------------------------------

    def _ensure_heartbeat(self) -> None:
        """Start the renewing thread if none runs (call with the lock held)."""
        if self._heartbeat is None or not self._heartbeat.is_alive():
            thread = threading.Thread(target=self._beat, name="compilecache-lease", daemon=True)
            self._heartbeat = thread
            thread.start()

    def _beat(self) -> None:
        interval = max(self.lease_ttl / 3.0, 0.05)
        while True:
            time.sleep(interval)
            with self._lock:
                if not self._leads or self._heartbeat is not threading.current_thread():
                    if self._heartbeat is threading.current_thread():
                        self._heartbeat = None
                    return
                leads = list(self._leads.values())
            now = self._clock()
            for lead in leads:
                if lead.deadline is not None and now >= lead.deadline:
                    # A deferred write that did not come (no backward call): let others compile.
                    self.finish(lead.key)
                    continue
                if now - lead.since > self.wait_timeout:
                    # Everyone waiting has given up by now: stop renewing, let it expire.
                    self._drop(lead)
                    continue
                try:
                    with lead.guard:
                        if lead.ended:
                            continue
                        renewed = self.leases.renew(lead.key, lead.token, self.lease_ttl)
                except Exception as exc:  # transient: try again at the next beat
                    log.debug("compilecache: could not renew the lease on %s: %s", lead.key, exc)
                    continue
                if not renewed:
                    # Lost (we stalled past its expiry and another process took it over): at
                    # worst both compile.
                    self._drop(lead)

    def _drop(self, lead: _Lead) -> None:
        with self._lock:
            if self._leads.get(lead.key) is lead:
                del self._leads[lead.key]
