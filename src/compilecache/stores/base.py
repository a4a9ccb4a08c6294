"""The bottom of the storage layer: the :class:`Store` base every backend subclasses, the
:class:`StoreWrapper` every wrapper subclasses, and the records they pass around.

A store is bytes in, bytes out; what a backend can do besides is a capability object
(:mod:`compilecache.stores.capabilities`). It knows nothing about JAX, torch or the entry format:
the integrity-checking :class:`compilecache.runtime.cache.Cache` sits on top. This module imports
nothing from the rest of ``stores/`` but the capabilities; the one place that puts stores
together from URLs is :mod:`compilecache.stores.registry`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from compilecache.errors import ConfigError
from compilecache.stores.capabilities import Claim, Counters, Found, Health, History, Leases

# Defined beside the capabilities that speak in it; imported from here by most of the code.
from compilecache.stores.capabilities import EntryMeta as EntryMeta


@dataclass(frozen=True)
class EntryInfo:
    """Metadata of one stored value, as returned by ``stat`` and ``scan``."""

    key: str
    size: int
    created: float
    accessed: float
    hits: int = 0
    meta: EntryMeta = field(default_factory=EntryMeta)

    @property
    def framework(self) -> str:
        return self.meta.framework

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def compile_time_s(self) -> float:
        return self.meta.compile_time_s


# A pack of entries in one object (see runtime/manifest.py): its key, and what turns its bytes
# into {key: (entry, metadata)}, raising when the pack is damaged.
Pack = tuple[str, Callable[[bytes], Mapping[str, tuple[bytes, EntryMeta | None]]]]


class Store(abc.ABC):
    """The storage layer: bytes in, bytes out.

    A backend implements the five abstract methods (``get``, ``put``, ``delete``, ``stat``,
    ``scan``) and may override ``close`` and the conveniences below, whose defaults are built
    on those five. Everything else a backend can do is a capability object
    (:mod:`compilecache.stores.capabilities`), ``None`` where it lacks it:

    - ``counters`` (:class:`Counters`), ``history`` (:class:`History`), ``leases``
      (:class:`Leases`), ``health`` (:class:`Health`, a guard's state).

    And two facts: ``read_only`` (writes are refused) and ``scans_cheaply`` (``scan`` costs about
    a request per page of keys, not a read per object: miss explanations list only the stores
    that scan cheaply).

    ``get`` never raises for a missing key (a miss is ``None``); errors a store cannot recover
    from raise :class:`~compilecache.errors.CompileCacheError` subclasses.
    """

    url: str
    read_only: bool = False
    scans_cheaply: bool = True
    counters: Counters | None = None
    history: History | None = None
    leases: Leases | None = None
    health: Health | None = None

    # -- the required protocol -------------------------------------------------------------------

    @abc.abstractmethod
    def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""

    @abc.abstractmethod
    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        """Store ``value`` under ``key``, replacing any earlier value atomically."""

    @abc.abstractmethod
    def delete(self, key: str) -> bool:
        """Remove ``key``; ``True`` when something was removed."""

    @abc.abstractmethod
    def stat(self, key: str) -> EntryInfo | None:
        """Metadata of ``key`` without reading its value."""

    @abc.abstractmethod
    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Metadata of every key starting with ``prefix`` (no payload reads)."""

    def close(self) -> None:
        """Release connections and files. Idempotent."""
        return None  # a safe default, not an abstract method

    # -- conveniences, defaulted on the protocol above ---------------------------------------------

    def peek(self, key: str) -> bytes | None:
        """The value under ``key`` for looking at it (ls, show, verify, export, explain): no hit
        counted, no access time refreshed, nothing backfilled, nothing removed. Damaged bytes
        raise :class:`~compilecache.errors.CorruptEntry` and stay where they are. The default is
        ``get``: a backend whose ``get`` records anything overrides it."""
        return self.get(key)

    def head(self, key: str, size: int) -> bytes | None:
        """The first ``size`` bytes of the value under ``key``, read as :meth:`peek` reads (for
        listings that show what an entry's header says without reading its payload). The
        default slices ``peek``; a backend that can read part of a value overrides it."""
        value = self.peek(key)
        return None if value is None else value[:size]

    def get_with_meta(self, key: str) -> Found | None:
        """``get`` and the entry's metadata (for a tier's backfill): in one read where the
        backend can (Redis, object stores, shared mounts), else a ``get`` and a ``stat``."""
        value = self.get(key)
        if value is None:
            return None
        try:
            info = self.stat(key)
        except Exception:  # the value is what matters; metadata only labels a backfilled copy
            info = None
        return value, info.meta if info is not None else None

    def get_many(self, keys: Sequence[str]) -> dict[str, Found]:
        """``get_with_meta`` of several keys, for prefetching: only the keys found are in the
        answer. Backends that can answer in one round trip (a Redis pipeline, concurrent object
        reads) override this; the default asks one key at a time."""
        found: dict[str, Found] = {}
        for key in keys:
            value = self.get_with_meta(key)
            if value is not None:
                found[key] = value
        return found

    def put_new(self, key: str, value: bytes, meta: EntryMeta | None = None) -> bool:
        """``put``, unless an entry is stored under ``key`` already: then nothing is written
        and the answer is ``False`` (the entry there stands; both are checked when read). One
        conditional request where the backend has them (an object store); the default looks,
        then puts, through this store's own ``stat`` and ``put``."""
        if self.stat(key) is not None:
            return False
        self.put(key, value, meta)
        return True

    def put_many(self, items: Sequence[tuple[str, bytes, EntryMeta | None]]) -> None:
        """``put`` of several entries (a prefetch's backfill): in one index transaction where
        the backend keeps an index (the local disk). The default puts one at a time, through
        this store's own ``put``: a wrapper that refuses or changes writes (read-only, a guard)
        applies to every entry."""
        for key, value, meta in items:
            self.put(key, value, meta)


class OneReadStore(Store):
    """A backend whose one read returns a value with its metadata (``_read``): Redis (one hash
    read), object stores and shared mounts (one file or object with its frame). ``get``,
    ``get_with_meta`` and ``peek`` are that read; ``peek`` with ``look_only``: no access time, no
    hit counted, nothing removed."""

    @abc.abstractmethod
    def _read(self, key: str, *, look_only: bool) -> tuple[bytes, EntryMeta] | None:
        """The value and metadata under ``key``; unless ``look_only``, record the access and
        drop what is found damaged."""

    def get(self, key: str) -> bytes | None:
        found = self._read(key, look_only=False)
        return found[0] if found is not None else None

    def get_with_meta(self, key: str) -> Found | None:
        return self._read(key, look_only=False)

    def peek(self, key: str) -> bytes | None:
        found = self._read(key, look_only=True)
        return found[0] if found is not None else None


class StoreWrapper(Store):
    """A store around another one: the byte operations forwarded, the capability objects and
    facts taken over as they are.

    Wrappers (:class:`~compilecache.stores.guarded.Guarded`,
    :class:`~compilecache.stores.readonly.ReadOnly`) override only what they change: a method
    they refuse or guard, a capability they replace (a guarded one, or ``None``).
    ``put_new`` and ``put_many`` are not forwarded unless a wrapper means to: their defaults go
    through the wrapper's own ``stat`` and ``put``.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.read_only = inner.read_only
        self.scans_cheaply = inner.scans_cheaply
        self.counters = inner.counters
        self.history = inner.history
        self.leases = inner.leases
        self.health = inner.health

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self.inner.put(key, value, meta)

    def delete(self, key: str) -> bool:
        return self.inner.delete(key)

    def stat(self, key: str) -> EntryInfo | None:
        return self.inner.stat(key)

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        return self.inner.scan(prefix)

    def close(self) -> None:
        self.inner.close()

    def peek(self, key: str) -> bytes | None:
        return self.inner.peek(key)

    def head(self, key: str, size: int) -> bytes | None:
        return self.inner.head(key, size)

    def get_with_meta(self, key: str) -> Found | None:
        return self.inner.get_with_meta(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, Found]:
        return self.inner.get_many(keys)


def get_or_claim(store: Store, key: str, ttl_s: float) -> tuple[Found | None, Claim | None]:
    """``store.get_with_meta(key)`` and, should it miss, the lease claim, in one round trip
    where the store's leases can fold them (Redis, object stores, tiers); else the read alone,
    and no claim (``None``: the caller claims)."""
    leases = store.leases
    folded = leases.get_or_claim(key, ttl_s) if leases is not None else None
    return folded if folded is not None else (store.get_with_meta(key), None)


# URL options every level takes, handled by the composition root and the wrappers (ReadOnly,
# Guarded), never by a backend: backends leave them out of what they pass on to their clients.
# Each backend names its own beside it (``OPTIONS``, and ``CLIENT_OPTIONS`` for its client
# library's): the registry checks a URL against them when it opens that backend.
WRAPPER_PARAMS = frozenset(
    {"readonly", "backoff", "max_backoff", "deadline", "guard", "write_behind"}
)


@dataclass(frozen=True)
class StoreURL:
    """One parsed store level: its URL, options and the settings a backend may need.

    ``create`` is False for commands that only read a store (``stats``, ``ls``, ``verify``...):
    a backend that would create something (a directory) then refuses with a clear error, so a
    mistyped path is reported instead of becoming a new, empty store.
    """

    raw: str
    scheme: str
    netloc: str
    path: str
    params: dict[str, str]
    max_size: int | None = None
    create: bool = True


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(params: Mapping[str, str], name: str, default: bool = False) -> bool:
    """The boolean URL option ``name`` (``1/true/yes/on``, ``0/false/no/off``): the one parser
    of boolean options, so that every backend and wrapper reads them the same way."""
    text = params.get(name)
    value = "" if text is None else text.strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"store URL option {name}={text!r} is not a boolean (use 1 or 0)")


# Schemes whose stores live on this machine's own disk or memory.
LOCAL_SCHEMES = frozenset({"file", "memory"})


def is_local(url: StoreURL) -> bool:
    """Whether the level lives on this machine's own disk or memory (not a shared mount): there
    is nothing to guard, and nothing to write in the background."""
    return url.scheme in LOCAL_SCHEMES and not flag(url.params, "shared")
