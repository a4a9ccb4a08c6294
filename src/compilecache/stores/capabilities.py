"""What a store may do besides holding bytes, each an object of its own.

A :class:`~compilecache.stores.base.Store` is bytes in, bytes out. What some backends can do on top
is a *capability*: an object the store holds in an attribute, ``None`` where the backend lacks it,
so a caller asks ``store.counters is not None`` instead of calling a method that answers a safe
default, and a wrapper forwards one object instead of a dozen methods:

- :class:`Counters` (``store.counters``): persistent counters shared by every process using the
  store;
- :class:`History` (``store.history``): a capped log of JSON records beside the entries
  (``"miss"``: explained misses, ``"run"``: per-process totals). History is never an entry: it is
  not in ``scan``, sizes or pruning;
- :class:`Leases` (``store.leases``): short-lived, expiring locks on keys for single-flight
  compiles (:mod:`compilecache.runtime.singleflight`);
- :class:`Health` (``store.health``): the state of a fail-open guard around a remote level
  (:mod:`compilecache.stores.guarded`).

sccache's ``Storage`` trait keeps the same split: a handful of byte operations, and the
multi-level statistics on the multi-level store, not in the trait.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# How many records of each kind a history keeps (the oldest are dropped first).
HISTORY_LIMIT = 1000
# The kinds of history records compilecache writes.
HISTORY_KINDS = ("miss", "run")

# What Leases.acquire returns when the store cannot coordinate after all: lead, with nothing to
# release.
NO_COORDINATION = ""

# The lease of ``key + UNWRITTEN_SUFFIX`` marks a key whose last compile ended without an entry
# (see compilecache.runtime.singleflight). Stores that answer a claim in one round trip read it
# there, so the name is part of the storage layer.
UNWRITTEN_SUFFIX = "#unwritten"

# The answers of Leases.claim: the lease was taken ("won"), another process holds it ("held"),
# the entry is there after all ("present"), or the key's last compile wrote nothing
# ("unwritten": compile without a lease).
ClaimState = Literal["won", "held", "present", "unwritten"]


@dataclass(frozen=True)
class EntryMeta:
    """What a writer tells the store about a value, so listings need not read payloads."""

    framework: str = ""
    name: str = ""
    compile_time_s: float = 0.0


# A value read with its metadata (None where the backend could not say).
Found = tuple[bytes, EntryMeta | None]


@dataclass(frozen=True)
class Claim:
    """What :meth:`Leases.claim` answered. ``checked``: the store also looked, in the same step,
    for the entry and for the key's unwritten mark (``"won"`` then means neither was there);
    unchecked, the caller looks itself. ``took_over``: won by breaking the lease of a process
    that no longer runs (killed without releasing it)."""

    state: ClaimState
    token: str | None = None
    checked: bool = False
    took_over: bool = False


class Counters(abc.ABC):
    """Persistent counters (name -> float) that every process using the store adds to."""

    @abc.abstractmethod
    def add(self, counters: Mapping[str, float]) -> None:
        """Add ``counters`` to the totals."""

    @abc.abstractmethod
    def read(self) -> dict[str, float]:
        """The totals."""

    @abc.abstractmethod
    def zero(self) -> None:
        """Reset the totals."""

    def prepare(self) -> None:
        """Counters will be added later (at exit): a store that reads before it adds may start
        reading now, in the background. Never blocks, never raises."""
        return None  # most stores add in one request: nothing to read ahead


class History(abc.ABC):
    """A capped log of JSON records per kind, newest first."""

    @abc.abstractmethod
    def add(self, kind: str, record: Mapping[str, object]) -> None:
        """Append ``record`` to the log of ``kind`` (the oldest beyond HISTORY_LIMIT go)."""

    @abc.abstractmethod
    def read(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        """The newest ``limit`` records of ``kind``, newest first."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Remove every record."""


class Leases(abc.ABC):
    """Expiring, exclusive leases on keys. A lease expires ``ttl_s`` seconds after it was taken
    or last renewed, so a holder that dies blocks nobody for longer. Leases are an
    optimisation, never a correctness device: they decide who compiles, and entries are still
    verified on every read."""

    @abc.abstractmethod
    def acquire(self, key: str, ttl_s: float) -> str | None:
        """A new token when the lease was taken, ``None`` when another process holds it, and
        :data:`NO_COORDINATION` when the store cannot coordinate after all (compile)."""

    @abc.abstractmethod
    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        """Extend a lease still held with ``token``; ``False`` when it was lost."""

    @abc.abstractmethod
    def release(self, key: str, token: str) -> None:
        """Give up a lease if ``token`` still holds it (never removes another holder's)."""

    def claim(self, key: str, ttl_s: float) -> Claim:
        """Take ``key``'s lease for a compile, after a miss. A store that can also checks, in the
        same round trip, that the entry is still absent and the key is not marked unwritten
        (``Claim.checked``); this default only takes the lease."""
        token = self.acquire(key, ttl_s)
        return Claim("held") if token is None else Claim("won", token)

    def get_or_claim(self, key: str, ttl_s: float) -> tuple[Found | None, Claim | None] | None:
        """The entry's read and, should it miss, :meth:`claim`, in one round trip; ``None``
        where the store cannot fold them (this default): the caller reads, then claims. The
        claim in the answer is ``None`` when none was made."""
        return None


class Health(abc.ABC):
    """The state of a fail-open guard (:class:`~compilecache.stores.guarded.Guarded`)."""

    @abc.abstractmethod
    def available(self) -> bool:
        """False while calls are being skipped (a back-off after a failure)."""

    @abc.abstractmethod
    def stats(self) -> dict[str, float]:
        """errors, timeouts, skipped, outages, recoveries, and down (1 while in back-off)."""
