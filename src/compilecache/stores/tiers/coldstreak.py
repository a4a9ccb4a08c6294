"""When a tier stops waiting for its remote level's answer: on a run of new, quick compiles.

A cold run asks the remote level for every key before compiling it, and learns "nothing here,
the lease is yours" one round trip later. For a program of many small functions that round trip
is as long as the compile (50 ms against a store 25 ms away per direction, for a 50 ms compile):
the wait doubles the cold run and saves nothing. A C++ build cache never meets this, because its
compiles take seconds.

:class:`ColdStreak` watches the answers. After ``streak`` lookups in a row that the remote level
answered with nothing (and no other process compiling the key), each followed by a compile
shorter than ``ratio`` round trips, the tier stops waiting: it queues the lease claim behind the
level's write-behind and answers "miss" at once (:meth:`waits` is false). The queued claim
first gives the compile a couple of round trips to finish: one that has queued its write by
then takes no lease (no one would wait for it any more, and on an object store a lease costs
five requests), and the claim only looks whether another process wrote the key meanwhile; a
compile still running takes the lease, as a waited lookup would have. Lookups wait again as
soon as:

- a queued claim finds the entry, or another process's lease (the wait would have saved that
  compile: :meth:`late` counts it),
- a compile takes ``ratio`` round trips or more (waiting would have cost little),
- a remote level serves a hit, or fails.

What the bet can lose is bounded: the compiles started between a queued claim and its late
answer, and the program's compiles were all quick until then. It never returns a wrong entry:
skipping a lookup only ever turns a hit into a compile. ``streak=0`` always waits.
"""

from __future__ import annotations

import threading

# A miss counts toward the streak when its compile took under this many lookup round trips:
# waiting cost it more than a tenth of its time.
DEFAULT_RATIO = 10.0
# Keys whose compile time is awaited at most (a bound on memory; more forgets the oldest).
MAX_PENDING = 1024


class ColdStreak:
    """The streak of new keys seen by one tier's lookups, and whether lookups wait."""

    def __init__(self, streak: int, *, ratio: float = DEFAULT_RATIO) -> None:
        self.streak = max(0, streak)
        self.ratio = ratio
        self._lock = threading.Lock()
        self._count = 0
        self._waits = True
        self._rtt = 0.0  # the last waited lookup's round trip, seconds
        # Keys missed after a waited lookup, waiting for their compile time.
        self._pending: dict[str, None] = {}

    def waits(self) -> bool:
        """Whether the next lookup waits for the remote level's answer."""
        return self._waits

    @property
    def rtt(self) -> float:
        """The last waited lookup's round trip to the remote level, seconds."""
        return self._rtt

    def missed(self, key: str, rtt: float) -> None:
        """A waited lookup of ``key`` found nothing in any level, and no other process compiles
        it; the remote level answered in ``rtt`` seconds."""
        if not self.streak:
            return
        with self._lock:
            self._rtt = rtt
            if len(self._pending) >= MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
            self._pending[key] = None

    def compiled(self, key: str, seconds: float) -> None:
        """``key`` was compiled in ``seconds`` and is being saved."""
        if not self.streak:
            return
        with self._lock:
            quick = seconds < self.ratio * self._rtt
            waited = key in self._pending
            self._pending.pop(key, None)
            if not quick:
                self._reset()
            elif waited:
                self._count += 1
                if self._count >= self.streak:
                    self._waits = False

    def late(self) -> None:
        """A lookup that was not waited for would have found the entry or another process's
        lease: wait again."""
        self.reset()

    def reset(self) -> None:
        """Something other than a new key came back (a remote hit, a held lease, a failure)."""
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        self._count = 0
        self._waits = True
