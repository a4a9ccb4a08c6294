"""Write-behind for a slow level: the compile that produced an entry never waits for the network.

A tier (:class:`~compilecache.stores.tiers.Tiered`) writes its first level (the local disk) at
once and hands the writes of a remote level to a :class:`WriteBehind`: a bounded queue drained
by a few background threads (a remote write is mostly waiting on the network, so several in
flight finish an exit's drain several times sooner). Operations on one key run one at a time, in
the order they were queued; lease claims and releases of that level go through the same queue, so
a release never overtakes the write it follows (a waiter on another host then finds the entry).

The queue is bounded in items and bytes; a write that does not fit is dropped and counted, never
waited for (the entry is in the local level; the remote misses one entry). At exit the session
drains the queue with a deadline; what is left then is dropped and counted too. The thread is a
daemon: a hung remote can never hold up the program's exit.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from compilecache.stores.base import EntryMeta, Store

log = logging.getLogger("compilecache")

DEFAULT_MAX_ITEMS = 1024
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
# Up to three operations per compiled key (a claim, the write, the release), each mostly a wait
# on the network: enough threads that a cold run of quick compiles does not queue up.
DEFAULT_WORKERS = 8
# An idle worker thread ends after this long; the next operation starts one again.
IDLE_S = 30.0


@dataclass
class _Op:
    """One deferred call: a put (``value`` set), or another call on the level (``call`` set: a
    lease claim or release). A put with ``if_present`` writes only where no entry is yet
    (``Store.put_new``) and calls ``if_present`` when there was one."""

    key: str
    value: bytes | None = None
    meta: EntryMeta | None = None
    call: Callable[[Store], None] | None = None
    if_present: Callable[[], None] | None = None

    @property
    def size(self) -> int:
        return len(self.value) if self.value is not None else 0


class WriteBehind:
    """Puts and lease releases of ``level``, done by ``workers`` background threads, in order
    per key."""

    def __init__(
        self,
        level: Store,
        *,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        workers: int = DEFAULT_WORKERS,
        on_done: Callable[[str, BaseException | None], None] | None = None,
    ) -> None:
        self.level = level
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.workers = max(1, workers)
        self._on_done = on_done
        self._ops: collections.deque[_Op] = collections.deque()
        self._bytes = 0
        self._running: set[str] = set()  # keys of the ops taken off the queue and running
        self._cond = threading.Condition(threading.RLock())
        self._threads: set[threading.Thread] = set()
        # Writes dropped: refused by a full queue, or still queued when the exit's drain ended.
        self.counters = {"dropped": 0}

    def put(self, key: str, value: bytes, meta: EntryMeta | None) -> bool:
        """Queue a put; ``False`` (counted as dropped) when the queue is full."""
        return self._add(_Op(key, value=value, meta=meta))

    def release_lease(self, key: str, token: str) -> bool:
        """Queue a lease release behind a pending write of ``key``; ``False`` (nothing queued:
        release it now) when no write of ``key`` is pending."""
        with self._cond:
            pending = key in self._running or any(op.key == key for op in self._ops)
            if pending:
                # Never dropped: a lease left held costs other hosts a wait until it expires.
                self.call(key, lambda level: _release(level, key, token))
        return pending

    def call(self, key: str, fn: Callable[[Store], None]) -> None:
        """Queue ``fn(level)`` among the operations on ``key`` (never dropped; ``fn`` handles
        its own errors: one that raises is logged and forgotten)."""
        self._add(_Op(key, call=fn), force=True)

    def wait_for_put(
        self, key: str, timeout: float, *, if_present: Callable[[], None] | None = None
    ) -> bool:
        """Wait up to ``timeout`` for a write of ``key`` to be queued; whether one is. Called
        from an operation on ``key``, it holds the write back until it returns (operations on
        one key run one at a time). With ``if_present``, the write found becomes a write of a
        new entry only: where the level holds one already it writes nothing and calls
        ``if_present`` (one conditional request on an object store, instead of a look first)."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next(
                    (op for op in self._ops if op.key == key and op.value is not None), None
                )
                if found is not None:
                    found.if_present = if_present
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=left)

    def cancel(self, key: str) -> None:
        """Forget the pending writes of ``key`` and wait for one under way (before a delete,
        which must not be undone by a write queued before it)."""
        with self._cond:
            kept = [op for op in self._ops if op.key != key or op.value is None]
            if len(kept) != len(self._ops):
                self._ops = collections.deque(kept)
                self._bytes = sum(op.size for op in kept)
            while key in self._running:
                self._cond.wait(timeout=1.0)

    def _add(self, op: _Op, *, force: bool = False) -> bool:
        with self._cond:
            full = len(self._ops) >= self.max_items or self._bytes + op.size > self.max_bytes
            if full and not force:
                self.counters["dropped"] += 1
                log.debug(
                    "compilecache: %s: write-behind queue full, %s dropped", self.level.url, op.key
                )
                return False
            self._ops.append(op)
            self._bytes += op.size
            if len(self._threads) < min(self.workers, len(self._ops) + len(self._running)):
                thread = threading.Thread(
                    target=self._run, name="compilecache-write-behind", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._cond.notify_all()
        return True

    def _next(self) -> _Op | None:
        """Take the first queued op whose key has none running (call with the lock held)."""
        for i, op in enumerate(self._ops):
            if op.key not in self._running:
                del self._ops[i]
                self._bytes -= op.size
                self._running.add(op.key)
                return op
        return None

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                op = self._next()
                while op is None:
                    timed_out = not self._cond.wait(timeout=IDLE_S)
                    op = self._next()
                    if op is None and timed_out:  # idle: end; the next op starts a thread
                        self._threads.discard(me)
                        return
            error: BaseException | None = None
            wrote = op.value is not None
            try:
                if op.call is not None:
                    op.call(self.level)
                elif op.if_present is None:
                    assert op.value is not None
                    self.level.put(op.key, op.value, op.meta)
                else:
                    assert op.value is not None
                    wrote = self.level.put_new(op.key, op.value, op.meta)
                    if not wrote:
                        op.if_present()  # nothing written: the entry there stands
            except Exception as exc:  # counted by the tier; the entry is still in the local level
                error = exc
            if not wrote:
                if error is not None:
                    log.debug("compilecache: %s: deferred call failed: %s", self.level.url, error)
            elif self._on_done is not None:
                self._on_done(op.key, error)
            with self._cond:  # after on_done: a drain that returns has every write counted
                self._running.discard(op.key)
                self._cond.notify_all()

    def drain(self, deadline_s: float) -> int:
        """Wait up to ``deadline_s`` for the queue to empty; drop (and count) what is left.
        Returns how many writes were dropped."""
        end = time.monotonic() + deadline_s
        with self._cond:
            while self._ops or self._running:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)
            dropped = [op for op in self._ops if op.value is not None]
            self._ops.clear()
            self._bytes = 0
            self.counters["dropped"] += len(dropped)
        if dropped:
            log.warning(
                "compilecache: %d writes to %s were not done within %.0fs at exit and were dropped",
                len(dropped),
                self.level.url,
                deadline_s,
            )
        return len(dropped)


def _release(level: Store, key: str, token: str) -> None:
    if level.leases is not None:
        level.leases.release(key, token)
