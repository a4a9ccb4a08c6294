"""The bottom of the storage layer: the :class:`Store` base every backend subclasses, the
:class:`StoreWrapper` every wrapper subclasses, and the records they pass around.

A store is bytes in, bytes out. It knows nothing about JAX, torch or the entry format: the
integrity-checking :class:`compilecache.runtime.cache.Cache` sits on top. This module imports nothing
from the rest of ``stores/``; the one place that puts stores together from URLs is
:mod:`compilecache.stores.registry`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from compilecache.errors import ConfigError


@dataclass(frozen=True)
class EntryMeta:
    """What a writer tells the store about a value, so listings need not read payloads."""

    framework: str = ""
    name: str = ""
    compile_time_s: float = 0.0


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


# How many records of each kind a history keeps (the oldest are dropped first).
HISTORY_LIMIT = 1000
# The kinds of history records compilecache writes.
HISTORY_KINDS = ("miss", "run")

# What acquire_lease returns when the store cannot coordinate: lead, with nothing to release.
NO_COORDINATION = ""

# The lease of ``key + UNWRITTEN_SUFFIX`` marks a key whose last compile ended without an entry
# (see compilecache.runtime.singleflight). Stores that answer claim_lease in one round trip read
# it there, so the name is part of the storage layer.
UNWRITTEN_SUFFIX = "#unwritten"

# The answers of Store.claim_lease: the lease was taken ("won"), another process holds it
# ("held"), the entry is there after all ("present"), or the key's last compile wrote nothing
# ("unwritten": compile without a lease).
ClaimState = Literal["won", "held", "present", "unwritten"]


# A pack of entries in one object (see runtime/manifest.py): its key, and what turns its bytes
# into {key: (entry, metadata)}, raising when the pack is damaged.
Pack = tuple[str, Callable[[bytes], Mapping[str, tuple[bytes, EntryMeta | None]]]]


@dataclass(frozen=True)
class Claim:
    """What :meth:`Store.claim_lease` answered. ``checked``: the store also looked, in the same
    step, for the entry and for the key's unwritten mark (``"won"`` then means neither was
    there); unchecked, the caller looks itself."""

    state: ClaimState
    token: str | None = None
    checked: bool = False


class Store(abc.ABC):
    """The storage layer: bytes in, bytes out, plus optional capabilities with safe defaults.

    A backend implements the five abstract methods. Every optional capability is a method here
    whose default answers "not supported" harmlessly (sccache's ``Storage`` trait does the same
    with its optional calls), so a caller always asks the store and never unwraps or probes it:

    - ``peek``: a read that changes nothing (no hit counted, no access time, no backfill, no
      repair). The default is ``get``: a backend whose ``get`` records anything overrides it.
    - ``scans_cheaply``: whether ``scan`` costs about a request per page of keys (an index, a
      directory) rather than a read of every stored object (an object store, whose object names
      are hashes): miss explanations list only the stores that scan cheaply.
    - counters (``keeps_stats``, ``add_stats``, ``read_stats``, ``zero_stats``): persistent
      counters shared by every process using the store.
    - history (``keeps_history``, ``add_history``, ``read_history``, ``clear_history``): a capped
      log of JSON records beside the entries (``"miss"``: explained misses, ``"run"``: per-process
      totals). History is never an entry: it is not in ``scan``, sizes or pruning.
    - leases (``supports_leases``, ``acquire_lease``, ``renew_lease``, ``release_lease``):
      short-lived, expiring locks on keys for single-flight compiles
      (:mod:`compilecache.runtime.singleflight`). A lease expires ``ttl_s`` seconds after it was taken or
      last renewed, so a holder that dies blocks nobody for longer. Leases are an optimisation,
      never a correctness device. ``acquire_lease`` returns a token when taken, ``None`` when
      another process holds it, and ``""`` (:data:`NO_COORDINATION`) when the store cannot
      coordinate (go ahead and compile, nothing to release). ``claim_lease`` and
      ``get_or_claim`` are the single-flight steps after a miss, folded into one round trip by
      the stores that can (Redis); their defaults are the separate calls.
    - shape: ``read_only``, ``levels`` (the tiers, fastest first), ``available`` (False while a
      remote level is in back-off), ``health`` (a guard's counters), ``level_stats``.

    ``get`` never raises for a missing key (a miss is ``None``); errors a store cannot recover
    from raise :class:`~compilecache.errors.CompileCacheError` subclasses.
    """

    url: str

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

    # -- reads -----------------------------------------------------------------------------------

    def peek(self, key: str) -> bytes | None:
        """The value under ``key`` for looking at it (ls, show, verify, export, explain): no hit
        counted, no access time refreshed, nothing backfilled, nothing removed. Damaged bytes
        raise :class:`~compilecache.errors.CorruptEntry` and stay where they are."""
        return self.get(key)

    def get_with_meta(self, key: str) -> tuple[bytes, EntryMeta | None] | None:
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

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
        """``get_with_meta`` of several keys, for prefetching: only the keys found are in the
        answer. Backends that can answer in one round trip (a Redis pipeline, concurrent object
        reads) override this; the default asks one key at a time."""
        found: dict[str, tuple[bytes, EntryMeta | None]] = {}
        for key in keys:
            value = self.get_with_meta(key)
            if value is not None:
                found[key] = value
        return found

    # -- writes ----------------------------------------------------------------------------------

    def put_new(self, key: str, value: bytes, meta: EntryMeta | None = None) -> bool:
        """``put``, unless an entry is stored under ``key`` already: then nothing is written
        and the answer is ``False`` (the entry there stands; both are checked when read). One
        conditional request where the backend has them (an object store); the default looks,
        then puts, and like ``put_many`` runs through this store's own ``stat`` and ``put``
        (wrappers do not forward it unless they mean to)."""
        if self.stat(key) is not None:
            return False
        self.put(key, value, meta)
        return True

    def put_many(self, items: Sequence[tuple[str, bytes, EntryMeta | None]]) -> None:
        """``put`` of several entries (a prefetch's backfill): in one index transaction where
        the backend keeps an index (the local disk). The default puts one at a time, through
        this store's own ``put``: a wrapper that refuses or changes writes (read-only, a guard)
        applies to every entry, since wrappers do not forward this to the store they wrap."""
        for key, value, meta in items:
            self.put(key, value, meta)

    # -- shape -----------------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (``?readonly=1``, ``COMPILECACHE_READ_ONLY=1``)."""
        return False

    @property
    def levels(self) -> list[Store]:
        """The levels of a tiered store, fastest first; a single store is its own level."""
        return [self]

    def available(self) -> bool:
        """False while calls are being skipped (a remote level in back-off after a failure)."""
        return True

    def scans_cheaply(self) -> bool:
        """Whether ``scan`` costs about a request per page of keys, not a read per object."""
        return True

    def health(self) -> dict[str, float]:
        """Counters of a fail-open guard (errors, timeouts, skipped, outages, recoveries, down)."""
        return {}

    def level_stats(self) -> dict[str, dict[str, float]]:
        """Per-level counters of a tiered store, keyed by level URL."""
        return {}

    # -- prefetch and background writes ---------------------------------------------------------

    def lookups(self) -> list[str]:
        """The keys this process looked up, in first-lookup order (tiers record them)."""
        return []

    def expect_prefetch(self) -> None:
        """A list of keys to prefetch is on its way (see :meth:`prefetch`)."""
        return None  # a safe default, not an abstract method

    def prefetch(
        self, keys: Sequence[str], deadline_s: float = 60.0, *, pack: Pack | None = None
    ) -> None:
        """Start copying ``keys`` from slower levels into the first one, in the background
        (from ``pack`` first, where given: several entries in one object)."""
        return None  # a safe default, not an abstract method

    def flush(self, deadline_s: float = 10.0) -> None:
        """Finish background writes, waiting up to ``deadline_s``."""
        return None  # a safe default, not an abstract method

    # -- persistent counters ---------------------------------------------------------------------

    def keeps_stats(self) -> bool:
        return False

    def add_stats(self, counters: Mapping[str, float]) -> None:
        """Add ``counters`` to the persistent totals (nothing, where none are kept)."""
        return None  # a safe default, not an abstract method

    def prepare_stats(self) -> None:
        """Counters will be added later (at exit): a store that reads before it adds may start
        reading now, in the background. Never blocks, never raises."""
        return None  # a safe default, not an abstract method

    def read_stats(self) -> dict[str, float]:
        return {}

    def zero_stats(self) -> None:
        """Reset the persistent totals."""
        return None  # a safe default, not an abstract method

    # -- history ---------------------------------------------------------------------------------

    def keeps_history(self) -> bool:
        return False

    def add_history(self, kind: str, record: Mapping[str, object]) -> None:
        """Append ``record`` to the capped log of ``kind`` (nothing, where none is kept)."""
        return None  # a safe default, not an abstract method

    def read_history(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        """The newest ``limit`` records of ``kind``, newest first."""
        return []

    def clear_history(self) -> None:
        """Remove every history record."""
        return None  # a safe default, not an abstract method

    # -- leases ----------------------------------------------------------------------------------

    def supports_leases(self) -> bool:
        return False

    def acquire_lease(self, key: str, ttl_s: float) -> str | None:
        return NO_COORDINATION

    def renew_lease(self, key: str, token: str, ttl_s: float) -> bool:
        """Extend a lease still held with ``token``; ``False`` when it was lost."""
        return False

    def release_lease(self, key: str, token: str) -> None:
        """Give up a lease if ``token`` still holds it (never removes another holder's)."""
        return None  # a safe default, not an abstract method

    def claim_lease(self, key: str, ttl_s: float) -> Claim:
        """Take ``key``'s lease for a compile. A store that can also checks, in the same round
        trip, that the entry is still absent and the key is not marked unwritten
        (``Claim.checked``); this default only takes the lease."""
        token = self.acquire_lease(key, ttl_s)
        return Claim("held") if token is None else Claim("won", token)

    def get_or_claim(
        self, key: str, ttl_s: float
    ) -> tuple[tuple[bytes, EntryMeta | None] | None, Claim | None]:
        """``get_with_meta``, and on a miss :meth:`claim_lease`, in one round trip where the
        store can. The claim is ``None`` when none was made (this default): the caller claims."""
        return self.get_with_meta(key), None


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

    def get_with_meta(self, key: str) -> tuple[bytes, EntryMeta | None] | None:
        return self._read(key, look_only=False)

    def peek(self, key: str) -> bytes | None:
        found = self._read(key, look_only=True)
        return found[0] if found is not None else None


class StoreWrapper(Store):
    """A store around another one that forwards every call, capabilities included.

    Wrappers (:class:`~compilecache.stores.guarded.Guarded`,
    :class:`~compilecache.stores.readonly.ReadOnly`) override only what they change, so a
    capability added to :class:`Store` reaches through every wrapper without further code.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url

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

    def get_with_meta(self, key: str) -> tuple[bytes, EntryMeta | None] | None:
        return self.inner.get_with_meta(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
        return self.inner.get_many(keys)

    def get_or_claim(
        self, key: str, ttl_s: float
    ) -> tuple[tuple[bytes, EntryMeta | None] | None, Claim | None]:
        return self.inner.get_or_claim(key, ttl_s)

    @property
    def read_only(self) -> bool:
        return self.inner.read_only

    @property
    def levels(self) -> list[Store]:
        inner_levels = self.inner.levels
        # A single store wrapped is one level: this wrapper, not the store inside it.
        return [self] if len(inner_levels) == 1 and inner_levels[0] is self.inner else inner_levels

    def available(self) -> bool:
        return self.inner.available()

    def scans_cheaply(self) -> bool:
        return self.inner.scans_cheaply()

    def health(self) -> dict[str, float]:
        return self.inner.health()

    def level_stats(self) -> dict[str, dict[str, float]]:
        return self.inner.level_stats()

    def lookups(self) -> list[str]:
        return self.inner.lookups()

    def expect_prefetch(self) -> None:
        self.inner.expect_prefetch()

    def prefetch(
        self, keys: Sequence[str], deadline_s: float = 60.0, *, pack: Pack | None = None
    ) -> None:
        self.inner.prefetch(keys, deadline_s, pack=pack)

    def flush(self, deadline_s: float = 10.0) -> None:
        self.inner.flush(deadline_s)

    def keeps_stats(self) -> bool:
        return self.inner.keeps_stats()

    def add_stats(self, counters: Mapping[str, float]) -> None:
        self.inner.add_stats(counters)

    def prepare_stats(self) -> None:
        self.inner.prepare_stats()

    def read_stats(self) -> dict[str, float]:
        return self.inner.read_stats()

    def zero_stats(self) -> None:
        self.inner.zero_stats()

    def keeps_history(self) -> bool:
        return self.inner.keeps_history()

    def add_history(self, kind: str, record: Mapping[str, object]) -> None:
        self.inner.add_history(kind, record)

    def read_history(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        return self.inner.read_history(kind, limit)

    def clear_history(self) -> None:
        self.inner.clear_history()

    def supports_leases(self) -> bool:
        return self.inner.supports_leases()

    def acquire_lease(self, key: str, ttl_s: float) -> str | None:
        return self.inner.acquire_lease(key, ttl_s)

    def renew_lease(self, key: str, token: str, ttl_s: float) -> bool:
        return self.inner.renew_lease(key, token, ttl_s)

    def release_lease(self, key: str, token: str) -> None:
        self.inner.release_lease(key, token)

    def claim_lease(self, key: str, ttl_s: float) -> Claim:
        return self.inner.claim_lease(key, ttl_s)


# URL options every level takes, handled by the composition root and the wrappers (ReadOnly,
# Guarded), never by a backend: backends leave them out of what they pass on to their clients.
WRAPPER_PARAMS = frozenset(
    {"readonly", "backoff", "max_backoff", "deadline", "guard", "max_size", "write_behind"}
)

# URL options a backend reads itself, named here once: the registry checks a URL against them
# without importing the backend, and the backend passes everything else on to its client.
REDIS_PARAMS = frozenset(
    {
        "prefix",
        "namespace",
        "ttl",
        "chunk_size",
        "timeout",
        "connect_timeout",
        "max_connections",
        "client",
    }
)
# What redis-py reads from a URL's query (its URL_QUERY_ARGUMENT_PARSERS, and the connection
# arguments it passes on as they are): a Redis URL may carry these for the client; anything else
# is refused when the URL is parsed (redis-py would fail every call on it).
REDIS_CLIENT_PARAMS = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "retry_on_error",
        "health_check_interval",
        "ssl_check_hostname",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
        "ssl_min_version",
        "protocol",
        "legacy_responses",
        "client_name",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_validate_ocsp",
        "username",
        "password",
    }
)
OBJECT_PARAMS = frozenset({"timeout", "retries", "conditional"})


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
