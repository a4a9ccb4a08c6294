"""Bookkeeping off the compiling thread: one background thread, in order, drained at exit.

A miss's explanation lists the store for entries of the same name and reads their headers; on a
remote level that is a round trip or more. None of it changes what the framework gets back, so
the integrations hand it to :class:`Background` instead of making the compile wait: work runs
one item at a time, in the order it was queued, on a daemon thread that ends when idle. The
session waits for the queue (with a deadline) before it flushes the counters at exit; work still
queued then is dropped, which loses explanations, never entries. Besides explanations it runs the
release of a lease whose entry is already written (a release that never runs only lets the
lease expire), and the write of a JAX compile's entry (queued with ``keep=True``: such an item
is never dropped, it runs on the caller's thread instead when the queue is full or the deadline
has passed).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("compilecache")

# Work items queued at most; more are dropped (an explanation is a convenience, not a duty).
MAX_QUEUED = 10_000
# An idle thread ends after this long; the next item starts one again.
IDLE_S = 10.0


class Background:
    """A FIFO of callables run on one daemon thread. ``add`` never blocks; nothing raises."""

    def __init__(self, name: str = "compilecache-background") -> None:
        self.name = name
        self._items: collections.deque[tuple[Callable[[], object], bool]] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = False
        self._pid = os.getpid()
        self.dropped = 0
        # Items queued with ``keep`` that have not finished (queued or running).
        self._kept = 0

    def add(self, work: Callable[[], object], *, keep: bool = False) -> None:
        """Queue ``work``; dropped (counted in ``dropped``) when the queue is full, unless
        ``keep``: then it runs now, on this thread."""
        with self._cond:
            self._forget_parent()
            queued = len(self._items) < MAX_QUEUED
            if queued:
                self._items.append((work, keep))
                self._kept += keep
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                    self._thread.start()
                self._cond.notify_all()
            elif not keep:
                self.dropped += 1
        if not queued and keep:
            _run(work)

    def _forget_parent(self) -> None:
        """In a forked child, drop the parent's queue (hold the lock): its thread does not run
        here, and its items (entry writes with their leases) are the parent's to finish."""
        if os.getpid() != self._pid:
            self._pid, self._thread, self._busy, self._kept = os.getpid(), None, False, 0
            self._items.clear()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items:
                    if not self._cond.wait(timeout=IDLE_S) and not self._items:
                        self._thread = None
                        return
                work, keep = self._items.popleft()
                self._busy = True
            try:
                _run(work)
            finally:
                with self._cond:
                    self._busy = False
                    self._kept -= keep
                    self._cond.notify_all()

    def on_its_thread(self) -> bool:
        """Whether the caller is this queue's thread (running one of its items)."""
        return self._thread is threading.current_thread()

    def wait_kept(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the items queued with ``keep`` (entry writes) to
        finish, not for the rest; returns whether they did."""
        end = time.monotonic() + timeout
        with self._cond:
            self._forget_parent()
            if self._thread is threading.current_thread():
                return self._kept <= 0  # an item waiting for the queue would wait on itself
            while self._kept > 0 and self._thread is not None:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)
            return self._kept <= 0

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queued work to finish; what is still queued
        then is dropped, except the items queued with ``keep``, which run now on this thread.
        Returns whether everything ran."""
        end = time.monotonic() + timeout
        with self._cond:
            self._forget_parent()
            while self._items or self._busy:
                left = end - time.monotonic()
                if left <= 0 or self._thread is None:
                    break
                self._cond.wait(timeout=left)
            done = not self._items and not self._busy
            kept = [work for work, keep in self._items if keep]
            dropped = len(self._items) - len(kept)
            self._items.clear()
            if dropped:
                self.dropped += dropped
                log.debug("compilecache: %d background items dropped at exit", dropped)
        for work in kept:
            _run(work)
        with self._cond:
            self._kept -= len(kept)
            self._cond.notify_all()
        return done


def _run(work: Callable[[], object]) -> None:
    try:
        work()
    except Exception as exc:  # each item guards itself; this is the last resort
        log.debug("compilecache: background work failed: %s", exc)
